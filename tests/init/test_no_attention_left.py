"""Init schemes on a ViT converted to GPSA in every block (ConViT's ablation), where no plain attention
layer is left: random and scaled-position run and say so in their report, impulse and mimetic (which act
on attention layers only) are refused in one line with the model untouched. Depth 1 and 2 with the
default `layers` (ConViT's share of the depth rounds to every block) and `layers` equal to the depth, for
timm and transformers ViTs."""

from __future__ import annotations

import pytest
import torch

import convinit
from convinit.errors import ConfigError
from convinit.init.attention_sites import no_attention_left
from convinit.models.convert import convert
from convinit.models.external import build_model_by_name

pytest.importorskip("timm")
pytest.importorskip("transformers")

SHAPE = dict(num_classes=10, img_size=8, in_chans=1)
ARGS = {
    "timm": lambda depth: dict(patch_size=2, embed_dim=16, depth=depth, num_heads=4, mlp_ratio=2),
    "hf": lambda depth: dict(patch_size=2, hidden_size=16, num_hidden_layers=depth, num_attention_heads=4,
                             intermediate_size=32),
}  # fmt: skip
NAMES = {"timm": "timm:vit_tiny_patch16_224", "hf": "hf:vit"}
EVERY_BLOCK = {"depth 1": (1, {}), "depth 2": (2, {}), "layers = depth 3": (3, {"layers": 3})}


def gpsa_everywhere(family: str, case: str) -> torch.nn.Module:
    depth, options = EVERY_BLOCK[case]
    torch.manual_seed(0)
    model = build_model_by_name(NAMES[family], **SHAPE, **ARGS[family](depth)).eval()
    return convert(model, "gpsa", **options)


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("case", EVERY_BLOCK)
@pytest.mark.parametrize("family", NAMES)
def test_random_init_reports_that_no_attention_layer_was_left_and_changes_nothing(family, case):
    model = gpsa_everywhere(family, case)
    before = state(model)
    report = convinit.initialize(model, "random", images=torch.randn(6, 1, 8, 8))
    assert "no plain attention layer is left" in report["no_attention_left"]
    assert "real_pass" not in report and "real_pass_held_out" not in report
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("family", NAMES)
def test_scaled_position_scales_the_table_alone_and_reports_that_no_attention_layer_was_left(family):
    model = gpsa_everywhere(family, "depth 2")
    before = state(model)
    report = convinit.initialize(model, "scaled-position", images=torch.randn(6, 1, 8, 8))
    assert "scaled-position init fitted and measured none" in report["no_attention_left"]
    assert "multiplied by 18" in report["position"]["pos_embed"] and "real_pass" not in report
    changed = {name for name, tensor in model.state_dict().items() if not torch.equal(tensor, before[name])}
    assert len(changed) == 1 and changed.pop().endswith(("pos_embed", "position_embeddings"))


@pytest.mark.parametrize("scheme", ["impulse", "mimetic"])
@pytest.mark.parametrize("case", EVERY_BLOCK)
@pytest.mark.parametrize("family", NAMES)
def test_a_scheme_that_fits_attention_is_refused_in_one_line_with_the_model_untouched(family, case, scheme):
    model = gpsa_everywhere(family, case)
    before = state(model)
    with pytest.raises(ConfigError, match=f"{scheme} init acts on attention layers, but every") as caught:
        convinit.initialize(model, scheme, images=torch.randn(6, 1, 8, 8))
    assert "\n" not in str(caught.value) and "init=random" in str(caught.value)
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("family", NAMES)
def test_a_model_with_one_block_left_as_attention_is_not_said_to_have_none(family):
    torch.manual_seed(0)
    model = convert(build_model_by_name(NAMES[family], **SHAPE, **ARGS[family](2)), "gpsa", layers=1)
    assert no_attention_left(model) is None
    report = convinit.initialize(model, "mimetic", images=torch.randn(6, 1, 8, 8))
    assert "no_attention_left" not in report and len(report["real_pass"]["layers"]) == 1
