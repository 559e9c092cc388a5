"""`convinit.convert`: ConViT's GPSA and paper 1's Q/K blend put into timm and transformers ViTs, checked
against their definitions (convinit's own GPSA layer, the blend's formula, the unconverted layer)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import convinit
from convinit.cli import main
from convinit.errors import ConfigError
from convinit.models.convert import PortedAttention, PortedBlend, PortedGPSA, convert, converted_layers
from convinit.models.external import build_model_by_name
from convinit.models.gpsa import GPSA
from convinit.models.layers import posemb_sincos_2d, record_attention

pytest.importorskip("timm")
pytest.importorskip("transformers")

SHAPE = dict(num_classes=10, img_size=16, in_chans=1)


def timm_vit(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    args = dict(patch_size=4, embed_dim=32, depth=3, num_heads=4, mlp_ratio=2) | kwargs
    return build_model_by_name("timm:vit_tiny_patch16_224", **SHAPE, **args).eval()


def hf_vit() -> torch.nn.Module:
    torch.manual_seed(0)
    args = dict(
        patch_size=4, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64
    )
    return build_model_by_name("hf:vit", **SHAPE, **args).eval()


USERS_VITS = {
    "timm": timm_vit,
    "timm, no class token": lambda: timm_vit(class_token=False, global_pool="avg"),
    "timm, registers and qk_norm": lambda: timm_vit(reg_tokens=2, qk_norm=True),
    "timm DeiT, distilled": lambda: build_model_by_name(
        "timm:deit_tiny_distilled_patch16_224", **SHAPE, patch_size=4, embed_dim=32, depth=3, num_heads=4
    ).eval(),
    "transformers": hf_vit,
}


def eager(model: torch.nn.Module) -> bool:
    """Whether a transformers model computes attention by hand rather than with SDPA (as convinit does)."""
    config = getattr(getattr(model, "model", None), "config", None)
    return getattr(config, "_attn_implementation", None) == "eager"


def close_every_gate(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for layer in converted_layers(model):
            if isinstance(layer, PortedGPSA):
                layer.gating_param.fill_(-1e4)  # sigmoid(-1e4) = 0: content attention alone


@pytest.mark.parametrize("family", USERS_VITS)
def test_with_its_gates_closed_a_gpsa_conversion_computes_the_model_it_was_made_from(family):
    """Without the local init (which sets V to the identity) and with g = 0, GPSA is the layer's own
    content attention: the converted model gives the original logits, bit for bit."""
    model = USERS_VITS[family]()
    images = torch.randn(3, 1, 16, 16)
    converted = convert(copy.deepcopy(model), "gpsa", layers=2, local_init=False)
    close_every_gate(converted)
    if eager(model):  # its softmax(Q K^T) written out (transformers 4.40) against convinit's SDPA
        torch.testing.assert_close(converted(images), model(images), rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(converted(images), model(images))
    assert [type(layer) for layer in converted_layers(converted)] == [PortedGPSA, PortedGPSA, PortedAttention]


def test_a_converted_layer_computes_what_convinits_gpsa_layer_computes_on_the_same_weights():
    """A timm ViT without prefix tokens, converted, and convinit's GPSA given the same qk, v, proj,
    pos_proj and gates: the same output on the same patch tokens (fast path and recorded path)."""
    model = convert(timm_vit(class_token=False, global_pool="avg", qkv_bias=False), "gpsa", layers=1)
    ported = model.blocks[0].attn
    gpsa = GPSA(32, 4, (4, 4), locality_strength=1.0).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in (*ported.parameters(), ported.gating_param):
            parameter.normal_(0, 0.3)
        gpsa.qk.weight.copy_(ported.qkv.weight[:64])
        gpsa.v.weight.copy_(ported.qkv.weight[64:])
        gpsa.proj.load_state_dict(ported.proj.state_dict())
        gpsa.pos_proj.load_state_dict(ported.pos_proj.state_dict())
        gpsa.gating_param.copy_(ported.gating_param)
    tokens = torch.randn(2, 16, 32)
    assert torch.allclose(ported(tokens), gpsa(tokens), atol=1e-6)
    with record_attention(ported) as maps_of_ported, record_attention(gpsa) as maps_of_gpsa:
        recorded = ported(tokens)
        gpsa(tokens)
    assert torch.allclose(recorded, gpsa(tokens), atol=1e-6)
    assert torch.allclose(next(iter(maps_of_ported.values())), next(iter(maps_of_gpsa.values())), atol=1e-6)


def test_prefix_rows_attend_by_content_and_no_patch_puts_positional_weight_on_a_prefix_key():
    """timm's class and register tokens stay first: their query rows are content attention only (as the
    unconverted layer's), and with every gate open a patch row puts all its weight on patches."""
    model = timm_vit(reg_tokens=2)
    tokens = torch.randn(2, 3 + 16, 32)  # class token, 2 registers, 4 x 4 patches
    original = model.blocks[0].attn
    q, k, _ = original.qkv(tokens).reshape(2, 19, 3, 4, 8).permute(2, 0, 3, 1, 4)
    content = torch.softmax(q @ k.transpose(-2, -1) * original.scale, dim=-1)
    convert(model, "gpsa", layers=1)
    with torch.no_grad():
        model.blocks[0].attn.gating_param.fill_(1e4)  # g = 1: positional attention alone
    with record_attention(model.blocks[0]) as maps:
        model.blocks[0].attn(tokens)
    attn = next(iter(maps.values()))  # (B, H, T, T)
    assert torch.allclose(attn[:, :, :3], content[:, :, :3], atol=1e-6)
    assert attn[:, :, 3:, :3].abs().max() == 0 and torch.allclose(attn.sum(-1), torch.ones(2, 4, 19))
    fast = model.blocks[0].attn(tokens)
    with record_attention(model.blocks[0]):
        assert torch.allclose(model.blocks[0].attn(tokens), fast, atol=1e-6)


@pytest.mark.parametrize("family", ["timm", "transformers"])
def test_the_blend_feeds_alpha_ln_x_plus_one_minus_alpha_p_to_q_and_k_and_ln_x_to_v(family):
    model = USERS_VITS[family]()
    convert(model, "blend", alpha=0.25)
    layer = converted_layers(model)[0]
    x = torch.randn(2, 1 + 16, 32)  # class token, then 4 x 4 patches
    p = torch.cat((torch.zeros(1, 32), posemb_sincos_2d(4, 4, 32)))  # no position for the class token
    w = layer.weights()
    qk_input = 0.25 * x + 0.75 * p
    bias = {name: w[f"{name}_bias"] for name in "qkv"}
    q, k = (F.linear(qk_input, w[n], bias[n]).reshape(2, 17, 4, 8).transpose(1, 2) for n in "qk")
    v = F.linear(x, w["v"], bias["v"]).reshape(2, 17, 4, 8).transpose(1, 2)
    expected = (torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, -1) @ v).transpose(1, 2).reshape(2, 17, 32)
    out = layer(x)
    out = out[0] if isinstance(out, tuple) else out
    projection = layer.o_proj if family == "transformers" else layer.proj
    assert torch.allclose(out, projection(expected), atol=1e-5)


def test_alpha_1_without_content_projection_is_the_unconverted_model():
    model = timm_vit()
    images = torch.randn(2, 1, 16, 16)
    assert torch.equal(convert(copy.deepcopy(model), "blend", alpha=1.0)(images), model(images))


def test_impulse_on_a_blend_conversion_fits_the_q_k_input_the_layers_really_see():
    """Fitted on the blend's real Q/K input, the maps of held-out images put most of their mass on the
    target taps in every converted layer (the pseudo-input P alone is only a proxy for it)."""
    model = convert(timm_vit(), "blend")
    report = convinit.initialize(model, "impulse", images=torch.randn(40, 1, 16, 16), seed=0)
    held_out = report["real_pass_held_out"]
    assert held_out["qk_input"] == "0.5 * norm1(x) + 0.5 * P" and len(held_out["layers"]) == 3
    assert held_out["mean_mass"] > 0.5


def test_an_init_on_a_gpsa_conversion_acts_on_the_layers_left_as_attention():
    model = convert(timm_vit(), "gpsa", layers=2)
    gpsa = [copy.deepcopy(model.blocks[i].attn.state_dict()) for i in range(2)]
    report = convinit.initialize(model, "mimetic", variant="trockman_kolter")
    assert report["layers"] == 1 or len(report.get("layers", [0])) == 1
    for i in range(2):
        for name, tensor in model.blocks[i].attn.state_dict().items():
            assert torch.equal(tensor, gpsa[i][name]), name
    with pytest.raises(ConfigError, match="every attention layer of this model was converted to GPSA"):
        convinit.initialize(convert(timm_vit(), "gpsa", layers=3), "impulse")


@pytest.mark.parametrize(
    ("build", "kind", "options", "message"),
    [
        (
            lambda: convinit.create_model("simplevit", **SHAPE, patch_size=4),
            "gpsa",
            {},
            "convert supports timm",
        ),
        (timm_vit, "gpsa", {"layers": 4}, "the model has 3 blocks"),
        (lambda: timm_vit(num_heads=2), "gpsa", {}, "square number of heads"),
        (timm_vit, "blend", {"alpha": 2}, "alpha must be in"),
        (timm_vit, "blend", {"locality_strength": 2.0}, "takes no option 'locality_strength'"),
        (timm_vit, "gpsa", {"local_init": "yes"}, "must be true or false"),
        (timm_vit, "conv", {}, "convert must be one of gpsa, blend"),
        (lambda: convert(timm_vit(), "blend"), "gpsa", {}, "converted already"),
        (lambda: timm_vit(dynamic_img_size=True), "gpsa", {}, "fixed patch grid"),
    ],
)
def test_a_conversion_that_cannot_apply_is_refused_in_one_line_and_changes_nothing(
    build, kind, options, message
):
    model = build()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ConfigError, match=message) as caught:
        convert(model, kind, **options)
    assert "\n" not in str(caught.value)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "overrides",
    [["convert=gpsa"], ["model=timm:vit_tiny_patch16_224", "convert=blend", "convert_args.alpha=1.5"],
     ["model=timm:vit_tiny_patch16_224", "convert_args.layers=1"]],
)  # fmt: skip
def test_a_convert_key_that_cannot_apply_exits_2_before_the_run_folder_exists(overrides, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "model_args.patch_size=2", "model_args.embed_dim=16", "model_args.num_heads=4"]
    if overrides[0] == "convert=gpsa":
        argv = ["train", "model_args.patch_size=2"]  # convinit's SimpleViT: nothing to convert
    assert main([*argv, *overrides, "--out", str(out), "--no-progress"]) == 2
    assert not out.exists()


def test_a_converted_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, monkeypatch):
    from convinit.config import resolve_config
    from convinit.train import train
    from tests.train.test_trainer import interrupted_then_resumed

    overrides = [
        "model=timm:vit_tiny_patch16_224", "model_args.patch_size=2", "model_args.embed_dim=16",
        "model_args.depth=2", "model_args.num_heads=4", "convert=blend",
        "convert_args.content_projection=true", "init=impulse", "epochs=3", "batch_size=90",
        "per_class=90", "deterministic=true", "mixup=0.2",
    ]  # fmt: skip
    reference = train(resolve_config(None, overrides), run_dir=tmp_path / "reference", progress=False)
    resumed = interrupted_then_resumed(resolve_config(None, overrides), tmp_path / "resumed", monkeypatch)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    projector = reference.model.blocks[0].attn.content_projector
    assert isinstance(reference.model.blocks[0].attn, PortedBlend) and not torch.equal(
        projector, torch.eye(16)
    )


def test_impulse_keeps_the_table_where_a_blend_projects_content_so_the_fit_survives_the_projector():
    """The content projector removes the fitted directions from LN(x): a fit carried by a x18 table inside
    LN(x) goes with them, so impulse keeps the table there and fits on P (and scales it otherwise)."""
    from convinit.analysis.init_quality import init_quality

    images = torch.randn(48, 1, 16, 16)
    plain = convert(timm_vit(), "blend")
    kept, scaled = (convert(timm_vit(), "blend", content_projection=True) for _ in range(2))
    table = plain.pos_embed.detach().clone()  # every model starts from the same draw (seed 0)
    for model, options in ((plain, {}), (kept, {}), (scaled, {"learned_pos_embed": "scale"})):
        model.init_report = convinit.initialize(model, "impulse", images=images, seed=0, **options)
    assert torch.allclose(plain.pos_embed, 18 * table) and torch.equal(kept.pos_embed, table)
    mass = {}
    for name, model in (("kept", kept), ("scaled", scaled)):
        for layer in converted_layers(model):
            layer.start_training()  # the projector, fixed as training starts
        mass[name] = init_quality(model, images[:16])["init_quality/target_mass"]
    assert mass["kept"] > 3 * mass["scaled"], mass
