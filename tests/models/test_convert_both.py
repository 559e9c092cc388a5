"""`convert(model, "gpsa+blend")`: both papers' architectures in one users' ViT, GPSA in the first blocks and
paper 1's blend in the rest, checked against the two conversions it is made of."""

from __future__ import annotations

import copy

import pytest
import torch

import convinit
from convinit.models.convert import PortedBlend, PortedGPSA, convert, converted_layers
from tests.models.test_convert import USERS_VITS, close_every_gate, eager, timm_vit

pytest.importorskip("timm")
pytest.importorskip("transformers")


@pytest.mark.parametrize("family", ["timm", "transformers"])
@pytest.mark.parametrize(
    ("layers", "kinds"), [(None, ["gpsa", "gpsa", "blend"]), (1, ["gpsa", "blend", "blend"])]
)
def test_gpsa_takes_the_first_blocks_and_the_blend_every_block_after_them(family, layers, kinds):
    """By default GPSA takes ConViT's share of the depth (2 of 3 blocks), as `convert=gpsa` does."""
    options = {} if layers is None else {"layers": layers}
    model = convert(USERS_VITS[family](), "gpsa+blend", alpha=0.25, **options)
    found = converted_layers(model)
    assert [{PortedGPSA: "gpsa", PortedBlend: "blend"}[type(layer)] for layer in found] == kinds
    assert all(layer.alpha == 0.25 for layer in found if isinstance(layer, PortedBlend))
    assert model.conversion["kind"] == "gpsa+blend" and model.conversion["layers"] == kinds.count("gpsa")


@pytest.mark.parametrize("family", ["timm", "transformers"])
def test_with_gates_closed_and_alpha_1_the_combined_conversion_is_the_model_it_was_made_from(family):
    model = USERS_VITS[family]()
    images = torch.randn(3, 1, 16, 16)
    converted = convert(copy.deepcopy(model), "gpsa+blend", layers=1, local_init=False, alpha=1.0)
    close_every_gate(converted)
    if eager(model):  # transformers 4.40 writes softmax(Q K^T) out; convinit uses SDPA
        torch.testing.assert_close(converted(images), model(images), rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(converted(images), model(images))


def test_impulse_on_the_combined_conversion_fits_the_blend_blocks_and_leaves_gpsa_as_its_local_init():
    model = convert(timm_vit(), "gpsa+blend", layers=1)
    gpsa = copy.deepcopy(model.blocks[0].attn.state_dict())
    report = convinit.initialize(model, "impulse", images=torch.randn(40, 1, 16, 16), seed=0)
    assert (
        len(report["real_pass_held_out"]["layers"]) == 2 and report["real_pass_held_out"]["mean_mass"] > 0.5
    )
    assert all(torch.equal(t, gpsa[name]) for name, t in model.blocks[0].attn.state_dict().items())


def test_a_combined_conversion_exports_and_loads_back_to_the_same_logits(tmp_path):
    from convinit.cli import main

    out, folder = tmp_path / "run", tmp_path / "model"
    argv = [
        "train", "model=timm:vit_tiny_patch16_224", "model_args.patch_size=2", "model_args.embed_dim=16",
        "model_args.depth=2", "model_args.num_heads=4", "convert=gpsa+blend", "convert_args.layers=1",
        "init=impulse", "init_args.learned_pos_embed=keep", "epochs=1", "per_class=10", "--out", str(out),
        "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0 and main(["export", str(out), str(folder)]) == 0
    from convinit.train.opening import open_run

    loaded, trained = convinit.from_pretrained(folder), open_run(out, data=False).model
    images = torch.randn(2, 1, 8, 8)
    assert loaded.conversion["kind"] == "gpsa+blend"
    assert torch.equal(loaded.eval()(images), trained.eval()(images))
