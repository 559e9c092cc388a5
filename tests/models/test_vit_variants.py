"""Paper 1's Models I, II, III on SimpleViT and the ViT-Ti/2 preset (docs/method.md §2 and §6)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.models import create_model, list_models, record_attention
from convinit.models.layers import patchify
from convinit.models.vit import FreeAttention

SMALL = dict(
    num_classes=5, img_size=8, in_chans=1, patch_size=2, dim=32, depth=2, heads=2, dim_head=16, mlp_dim=32
)
VARIANTS = [("x", None), ("blend", 0.0), ("blend", 0.5), ("free", None)]


def small(qk_input: str = "x", alpha: float | None = None, **kwargs):
    torch.manual_seed(0)
    return create_model("simplevit", qk_input=qk_input, alpha=alpha, **{**SMALL, **kwargs}).eval()


def test_vit_tiny_patch2_32_has_the_follow_up_configuration():
    assert "vit_tiny_patch2_32" in list_models()
    model = create_model("vit_tiny_patch2_32", num_classes=10)
    attn = model.blocks[0].attn
    assert len(model.blocks) == 12 and model.grid == (16, 16) and model.pos_embedding.shape == (256, 192)
    assert attn.heads == 3 and attn.dim_head == 64 and model.blocks[0].mlp.net[1].out_features == 768
    assert model.qk_input == "x" and model.pos_embed == "input"
    assert create_model("vit_tiny_patch2_32", qk_input="free").blocks[0].attn.q_factors.shape == (3, 256, 64)


@pytest.mark.parametrize("qk_input, alpha", VARIANTS)
def test_each_qk_input_runs_and_its_recorded_maps_match_the_fast_path(qk_input, alpha):
    model = small(qk_input, alpha)
    x = torch.randn(3, 1, 8, 8)
    fast = model(x)
    with record_attention(model) as maps:
        explicit = model(x)
    assert torch.allclose(fast, explicit, atol=1e-5)
    assert set(maps) == {"blocks.0.attn", "blocks.1.attn"}
    assert maps["blocks.1.attn"].shape == (3, 2, 16, 16)
    assert torch.allclose(maps["blocks.1.attn"].sum(-1), torch.ones(3, 2, 16), atol=1e-5)


def test_blend_queries_and_keys_see_alpha_ln_x_plus_one_minus_alpha_p():
    alpha = 0.3
    model = small("blend", alpha)
    images = torch.randn(2, 1, 8, 8)
    block, attn = model.blocks[0], model.blocks[0].attn
    with record_attention(model) as maps:
        model(images)
    h = block.norm(model.patch_embed(patchify(images, 2)))  # pos_embed "none": P is not in the stream
    qk = alpha * h + (1 - alpha) * model.pos_embedding
    q, k = attn.queries_keys(qk)
    expected = torch.softmax(q @ k.transpose(-2, -1) * attn.scale, dim=-1)
    assert torch.allclose(maps["blocks.0.attn"], expected, atol=1e-5)


def test_alpha_zero_and_free_maps_do_not_depend_on_the_image():
    for qk_input, alpha in [("blend", 0.0), ("free", None)]:
        model = small(qk_input, alpha)
        with record_attention(model) as maps:
            model(torch.randn(2, 1, 8, 8))
        assert torch.allclose(maps["blocks.1.attn"][0], maps["blocks.1.attn"][1], atol=1e-6)


def test_position_embedding_enters_the_stream_only_where_asked():
    assert small("x").pos_embed == "input"
    assert small("blend", 0.5).pos_embed == "none" and small("free").pos_embed == "none"
    x = torch.randn(2, 1, 8, 8)
    assert not torch.allclose(small("blend", 0.5)(x), small("blend", 0.5, pos_embed="input")(x))
    without = small("x", pos_embed="none")
    assert without.logit_position_embedding() is None  # SimpleViT without position embedding (Table 1)


def test_free_attention_maps_are_softmax_of_the_factor_product():
    attn = small("free").blocks[0].attn
    assert isinstance(attn, FreeAttention)
    expected = F.softmax(attn.q_factors @ attn.k_factors * attn.scale, dim=-1)
    assert torch.allclose(attn.maps(), expected)


@pytest.mark.parametrize("qk_input, alpha", VARIANTS)
def test_freeze_attention_freezes_only_what_forms_the_maps(qk_input, alpha):
    model = small(qk_input, alpha, freeze_attention=True)
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    if qk_input == "free":
        assert frozen == {f"blocks.{i}.attn.{n}" for i in range(2) for n in ("q_factors", "k_factors")}
    else:
        assert frozen == {f"blocks.{i}.attn.to_qk.weight" for i in range(2)}


def test_simplevit_defaults_are_unchanged():
    model = create_model("simplevit")
    assert model.qk_input == "x" and model.alpha is None and model.pos_embed == "input"
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(qk_input="blend", alpha=1.5), "alpha must be a number in \\[0, 1\\]"),
        (dict(qk_input="blend", alpha=-0.1), "alpha must be a number in \\[0, 1\\]"),
        (dict(qk_input="x", alpha=0.5), "alpha only applies to qk_input='blend'"),
        (dict(qk_input="conv"), "qk_input must be one of x, blend, free"),
        (dict(pos_embed="learned"), "pos_embed must be 'input'"),
        (dict(qk_input="x", content_warmup=10), "content_warmup and content_projection act on the blended"),
        (dict(qk_input="free", content_projection=True), "content_warmup and content_projection act on"),
        (dict(qk_input="blend", content_warmup=-1), "content_warmup must be a whole number of steps"),
        (dict(qk_input="blend", content_warmup=2.5), "content_warmup must be a whole number of steps"),
        (dict(qk_input="blend", content_projection="yes"), "content_projection must be true or false"),
    ],
)
def test_bad_variant_options_are_one_line_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message) as info:
        create_model("simplevit", **{**SMALL, **kwargs})
    assert "\n" not in str(info.value)


def blend_maps(model, images: torch.Tensor, content: float, projector: torch.Tensor | None = None):
    """Block 0's maps computed by hand from Q/K input content * (LN(x) @ projector) + (1 - alpha) * P."""
    block, attn = model.blocks[0], model.blocks[0].attn
    h = block.norm(model.patch_embed(patchify(images, 2)))
    h = h if projector is None else h @ projector
    q, k = attn.queries_keys(content * h + (1 - model.alpha) * model.pos_embedding)
    return torch.softmax(q @ k.transpose(-2, -1) * attn.scale, dim=-1)


def recorded_maps(model, images: torch.Tensor) -> torch.Tensor:
    with record_attention(model) as maps:
        model(images)
    return maps["blocks.0.attn"]


def test_content_warmup_ramps_the_content_weight_from_zero_to_alpha_over_its_steps():
    model, images = small("blend", 0.4, content_warmup=4), torch.randn(2, 1, 8, 8)
    # before training starts the ramp is complete: the init and a model used outside training see alpha
    assert torch.allclose(recorded_maps(model, images), blend_maps(model, images, 0.4), atol=1e-5)
    step = model.start_training()
    for taken, content in [(0, 0.0), (1, 0.1), (2, 0.2), (4, 0.4), (6, 0.4)]:
        while model.content_steps < taken:
            step()
        assert torch.allclose(recorded_maps(model, images), blend_maps(model, images, content), atol=1e-5)


def test_content_projection_removes_the_fitted_q_k_directions_from_the_content_only():
    model, images = small("blend", 0.5, content_projection=True), torch.randn(2, 1, 8, 8)
    fitted = torch.linalg.qr(torch.randn(32, 3))[0]  # (D, 3) orthonormal: the "fitted" input directions
    rest = torch.eye(32) - fitted @ fitted.T  # weak noise elsewhere (outside the fitted directions)
    weight = torch.randn(64, 3) * 10 @ fitted.T + torch.randn(64, 32) * 0.01 @ rest
    with torch.no_grad():
        model.blocks[0].attn.to_qk.weight.copy_(weight)
    assert torch.equal(model.blocks[0].content_projector, torch.eye(32))  # identity until training starts
    assert model.start_training() is None  # no per-step state without content_warmup
    projector = model.blocks[0].content_projector
    # noise of 0.01 beside directions of strength 10 tilts the singular subspace by ~1e-3
    assert torch.allclose(projector, rest, atol=1e-3)
    assert torch.allclose(torch.randn(5, 32) @ projector @ fitted, torch.zeros(5, 3), atol=1e-2)
    expected = blend_maps(model, images, 0.5, projector)
    assert torch.allclose(recorded_maps(model, images), expected, atol=1e-5)


def test_content_options_add_no_state_when_off():
    keys = set(small("blend", 0.5).state_dict())
    assert not any("content" in key for key in keys)
    assert small("blend", 0.5).start_training() is None
