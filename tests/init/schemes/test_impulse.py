"""Impulse initialisation (docs/method.md §3): maps that start as impulse convolution matrices."""

from __future__ import annotations

import pytest
import torch

from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.init.targets import Targets, map_quality
from convinit.models import create_model, record_attention
from convinit.models.filters import centre_first_offsets, impulse_conv_matrix, row_offsets, target_keys

DIGITS = dict(
    num_classes=10, img_size=8, in_chans=1, patch_size=1, dim=64, depth=4, heads=4, dim_head=16, mlp_dim=64
)
TINY = dict(
    num_classes=5, img_size=8, in_chans=1, patch_size=2, dim=32, depth=2, heads=2, dim_head=16, mlp_dim=32
)
KINDS = [("x", None), ("blend", 0.0), ("blend", 0.1), ("free", None)]


def model_of(qk_input: str, alpha: float | None = None, config: dict = TINY, **kwargs):
    torch.manual_seed(0)
    return create_model("simplevit", qk_input=qk_input, alpha=alpha, **{**config, **kwargs})


def offsets_of(report: dict, layer: int) -> list[tuple[int, int]]:
    return [tuple(h["offset"]) for h in report["layers"][layer]["heads"]]


@pytest.mark.parametrize("qk_input, alpha", [("blend", 0.0), ("x", None), ("free", None)])
def test_closed_form_reaches_high_target_mass_on_an_explicit_pseudo_input(qk_input, alpha):
    options = {} if qk_input == "free" else dict(pseudo_input="P" if qk_input == "blend" else "LN(P)")
    options.update(target_mass=0.95, content_floor=0.0)  # no room kept for content: P alone
    report = initialize(model_of(qk_input, alpha, DIGITS), "impulse", seed=0, **options)
    assert report["solver"] == "closed_form" and report["seconds"] > 0
    assert report["mean_mass"] >= 0.9
    assert report["mean_argmax_agreement"] == 1.0
    assert len(report["layers"]) == 4 and len(report["layers"][0]["heads"]) == 4


def test_alpha_zero_model_at_step_0_attends_by_impulse_convolutions():
    model = model_of("blend", 0.0, DIGITS).eval()
    report = initialize(model, "impulse", seed=1, target_mass=0.95, content_floor=0.0)
    with record_attention(model) as maps, torch.no_grad():
        model(torch.randn(2, 1, 8, 8))
    for layer, attention in enumerate(maps.values()):
        for head, offset in enumerate(offsets_of(report, layer)):
            _, inside = target_keys(offset, (8, 8))
            pointed = row_offsets(attention[:, head], (8, 8))  # (B, N, 2)
            assert (pointed[:, inside] == torch.tensor(offset)).all()
            rows = attention[:, head][:, inside]  # (B, inside, N): close to the impulse rows
            target = impulse_conv_matrix(offset, (8, 8))[inside]
            assert (rows * target).sum(-1).mean() > 0.85


@pytest.mark.parametrize("qk_input, alpha", KINDS)
@pytest.mark.parametrize("scheme", ["impulse", "mimetic"])
def test_each_scheme_initialises_each_qk_input_kind(scheme, qk_input, alpha):
    model = model_of(qk_input, alpha)
    before = {n: p.clone() for n, p in model.named_parameters() if "attn" in n}
    report = initialize(model, scheme, seed=0)
    changed = {n for n, p in model.named_parameters() if "attn" in n and not torch.equal(p, before[n])}
    logit_params = {"q_factors", "k_factors"} if qk_input == "free" else {"to_qk.weight"}
    assert {n.split("attn.")[1] for n in changed} >= logit_params
    out = model(torch.randn(2, 1, 8, 8))
    assert torch.isfinite(out).all() and report["scheme"] == scheme
    if scheme == "impulse" and (alpha == 0.0 or qk_input == "free"):  # input-independent maps
        assert report["mean_argmax_agreement"] == 1.0 and report["mean_mass"] >= 0.75


def test_optimize_solver_at_reduced_settings_gives_argmax_correct_low_mse_maps():
    # Paper recipe (Adam on the MSE, scale 0.1, uniform init, periodic renormalisation) reduced from
    # 10,000 steps at lr 1e-4 renormalising every 100 to 200 steps at lr 1e-2 renormalising every 50,
    # on a 6x6 grid with D 512 and 2 heads of 16.
    model = create_model("simplevit", img_size=6, in_chans=1, patch_size=1, dim=512, depth=1, heads=2,
                         dim_head=16, mlp_dim=32, qk_input="blend", alpha=0.0)  # fmt: skip
    options = dict(solver="optimize", steps=200, lr=1e-2, renorm_every=50, kernel_size=3, seed=0)
    report = initialize(model, "impulse", **options)
    uniform = map_quality(torch.full((2, 36, 36), 1 / 36), Targets.build(offsets_of(report, 0), (6, 6)))
    assert report["mean_argmax_agreement"] == 1.0
    assert report["mean_mse"] < 0.25 * sum(uniform["mse"]) / 2
    assert report["mean_mass"] > 0.5  # the uniform map has 1/36
    assert all(h["logit_gap"] is None for h in report["layers"][0]["heads"])


def test_optimize_solver_fits_model_iii_factors_directly():
    # 150 steps at lr 3e-2 renormalising every 50, on a 4x4 grid with 2 heads of 16
    model = model_of("free", config=dict(TINY, depth=1))
    options = dict(solver="optimize", steps=150, lr=3e-2, renorm_every=50, kernel_size=3, seed=0)
    report = initialize(model, "impulse", **options)
    assert report["mean_argmax_agreement"] == 1.0 and report["mean_mass"] > 0.5


def test_centre_first_offsets_cycle_by_layer_times_heads_plus_head():
    report = initialize(model_of("blend", 0.0, DIGITS), "impulse", kernel_size=3, offsets="centre_first")
    order = centre_first_offsets(3)
    for layer in range(4):
        assert offsets_of(report, layer) == [order[(layer * 4 + h) % 9] for h in range(4)]
    used = {o for layer in range(4) for o in offsets_of(report, layer)}
    assert used == set(order)  # all nine offsets are used across the four layers


def test_more_heads_than_taps_repeat_offsets_within_a_layer_and_say_so_in_one_line():
    sixteen = dict(TINY, heads=16, dim_head=2, depth=1)
    with pytest.warns(UserWarning, match="16 heads on a 3x3 kernel's 9 taps.*kernel_size=5"):
        report = initialize(model_of("blend", 0.0, sixteen), "impulse", kernel_size=3, offsets="centre_first")
    order = centre_first_offsets(3)
    assert offsets_of(report, 0) == [order[h % 9] for h in range(16)]  # every tap, then head h + 9 = head h
    assert "\n" not in report["offsets_note"] and "wraps" in report["offsets_note"]
    with pytest.warns(UserWarning, match="drawn with replacement"):
        drawn = initialize(model_of("blend", 0.0, sixteen), "impulse", kernel_size=3, seed=0)
    assert len(set(offsets_of(drawn, 0))) <= 9
    assert "offsets_note" not in initialize(model_of("blend", 0.0, sixteen), "impulse", kernel_size=5, seed=0)


def test_shared_random_offsets_are_the_same_in_every_layer_and_fresh_ones_are_not():
    shared = initialize(model_of("blend", 0.0, DIGITS), "impulse", share_offsets=True, seed=3)
    assert all(offsets_of(shared, layer) == offsets_of(shared, 0) for layer in range(4))
    fresh = initialize(model_of("blend", 0.0, DIGITS), "impulse", seed=3)
    assert any(offsets_of(fresh, layer) != offsets_of(fresh, 0) for layer in range(1, 4))


def test_seed_makes_the_init_reproducible():
    a, b = model_of("blend", 0.0), model_of("blend", 0.0)
    torch.manual_seed(123)
    initialize(a, "impulse", seed=7)
    torch.manual_seed(456)
    initialize(b, "impulse", seed=7)
    assert torch.equal(a.blocks[1].attn.to_qk.weight, b.blocks[1].attn.to_qk.weight)


def test_fixed_logit_gap_is_used_and_larger_gaps_give_sharper_maps():
    soft = initialize(model_of("blend", 0.0, DIGITS), "impulse", logit_gap=30.0, seed=0)
    sharp = initialize(model_of("blend", 0.0, DIGITS), "impulse", logit_gap=1000.0, seed=0)
    assert {h["logit_gap"] for layer in soft["layers"] for h in layer["heads"]} == {30.0}
    assert sharp["mean_mass"] > soft["mean_mass"]
    assert sharp["mean_weight_scale"] > soft["mean_weight_scale"]


def test_value_init_mimetic_also_sets_the_value_path():
    model = model_of("blend", 0.0)
    v = model.blocks[0].attn.to_v.weight.clone()
    initialize(model, "impulse", value_init="mimetic", seed=0)
    assert not torch.equal(model.blocks[0].attn.to_v.weight, v)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(solver="adam"), "impulse solver must be one of closed_form, optimize"),
        (dict(offsets="spiral"), "impulse offsets must be one of random, centre_first"),
        (dict(pseudo_input="X"), "pseudo_input must be 'P' or 'LN\\(P\\)'"),
        (dict(target_mass=1.5), "target_mass must be in \\(0, 1\\)"),
        (dict(target_shape="ring"), "impulse target_shape must be one of best, impulse, bump"),
        (dict(bump_width=0), "impulse bump_width must be > 0"),
        (dict(kernel_size=4), "kernel_size must be an odd"),
        (dict(step=10), "impulse init takes no option step"),
    ],
)
def test_bad_impulse_options_are_one_line_config_errors(options, message):
    with pytest.raises(ConfigError, match=message) as info:
        initialize(model_of("blend", 0.0), "impulse", **options)
    assert "\n" not in str(info.value)


def test_a_kernel_larger_than_the_token_grid_allows_is_refused_before_its_offsets_are_listed():
    """TINY's grid is 4x4: a 9x9 kernel's outer taps point outside it from every token. 1000001 would
    list 10^12 offsets; it is refused as fast as 9, and the model is left as it was."""
    model = model_of("blend", 0.0)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    for kernel_size in (9, 1000001):
        with pytest.raises(ConfigError, match=f"kernel_size={kernel_size} is larger than the 4x4 token grid"):
            initialize(model, "impulse", kernel_size=kernel_size)
    assert all(torch.equal(t, before[name]) for name, t in model.state_dict().items())
    initialize(model, "impulse", kernel_size=7, seed=0)  # 2 * 4 - 1: the largest that reaches the grid


def test_models_without_positions_or_attention_are_refused():
    with pytest.raises(ConfigError, match="pos_embed='none'"):
        initialize(model_of("x", pos_embed="none"), "impulse")
    convmixer = create_model("convmixer", img_size=8, in_chans=1, dim=8, depth=1, patch_size=2)
    for scheme in ("impulse", "mimetic"):
        with pytest.raises(ConfigError, match="does not support ConvMixer; it supports convinit SimpleViT"):
            initialize(convmixer, scheme)


def test_timm_vision_transformer_patch_token_maps_become_impulse_convolutions():
    timm_vit = pytest.importorskip("timm.models.vision_transformer")
    torch.manual_seed(0)
    model = timm_vit.VisionTransformer(
        img_size=16, patch_size=2, in_chans=1, num_classes=3, embed_dim=64, depth=2, num_heads=4
    )  # fmt: skip  (class token, learnable pos_embed)
    options = dict(kernel_size=3, learned_pos_embed="sincos", pseudo_input="LN(P)", target_mass=0.95)
    report = initialize(model, "impulse", seed=0, **options)
    assert report["mean_mass"] >= 0.9 and report["mean_argmax_agreement"] == 1.0
    # check independently: norm1(patch rows of pos_embed) through the fused qkv (biases included)
    block, inner = model.blocks[1], 64
    with torch.no_grad():
        x = block.norm1(model.pos_embed[0, 1:])  # (N, D): the class token's row is left out
        q, k, _ = block.attn.qkv(x).split(inner, dim=-1)
        q, k = (t.reshape(64, 4, 16).transpose(0, 1) for t in (q, k))  # (H, N, d)
        maps = torch.softmax(q @ k.transpose(1, 2) * block.attn.scale, dim=-1)
    quality = map_quality(maps, Targets.build(offsets_of(report, 1), (8, 8)))
    assert quality["mass"] == pytest.approx([h["mass"] for h in report["layers"][1]["heads"]], abs=1e-4)
    assert torch.isfinite(model(torch.randn(2, 1, 16, 16))).all()
    initialize(model, "mimetic", seed=0)  # and the mimetic baseline takes the same model


def test_timm_eva_maps_from_its_own_q_bias_become_impulse_convolutions():
    eva = pytest.importorskip("timm.models.eva")
    torch.manual_seed(0)
    shape = dict(img_size=16, patch_size=2, in_chans=1, num_classes=3, embed_dim=64, depth=2, num_heads=4)
    model = eva.Eva(**shape, qkv_bias=True, use_rot_pos_emb=False)  # q_bias, k_bias apart from the qkv
    with torch.no_grad():
        model.blocks[1].attn.q_bias.normal_()  # as if trained: the fit must zero it
    options = dict(kernel_size=3, learned_pos_embed="sincos", pseudo_input="LN(P)", target_mass=0.95)
    report = initialize(model, "impulse", seed=0, **options)
    assert report["mean_mass"] >= 0.9 and report["mean_argmax_agreement"] == 1.0
    block, attn = model.blocks[1], model.blocks[1].attn
    with torch.no_grad():
        x = block.norm1(model.pos_embed[0, 1:])  # (N, D) patch rows
        bias = torch.cat((attn.q_bias, attn.k_bias, attn.v_bias))  # as Eva's forward builds it
        q, k, _ = torch.nn.functional.linear(x, attn.qkv.weight, bias).split(64, dim=-1)
        q, k = (t.reshape(64, 4, 16).transpose(0, 1) for t in (q, k))  # (H, N, d)
        maps = torch.softmax(q @ k.transpose(1, 2) * attn.scale, dim=-1)
    quality = map_quality(maps, Targets.build(offsets_of(report, 1), (8, 8)))
    assert min(quality["mass"]) >= 0.9


def test_impulse_refuses_timm_models_with_rotary_position_embeddings_but_mimetic_takes_them():
    eva = pytest.importorskip("timm.models.eva")
    shape = dict(img_size=16, patch_size=2, in_chans=1, num_classes=3, embed_dim=64, depth=1, num_heads=4)
    model = eva.Eva(**shape, use_rot_pos_emb=True)  # EVA-02 style
    with pytest.raises(ConfigError, match="rotary position embeddings"):
        initialize(model, "impulse")
    assert initialize(model, "mimetic")["scheme"] == "mimetic"
