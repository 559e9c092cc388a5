"""Impulse and mimetic init on the ViTs people already use: timm's and transformers', default options.

Small models (D 64, depth 4, 4 heads, 4 px patches) on real Fashion-MNIST (28 px) and digits (upsampled
to 32 px); the figures that matter are measured on images the fit did not see.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.init.positions import POS_EMBED_SCALE
from convinit.models.filters import impulse_conv_matrix
from tests.conftest import FASHION_DIR
from tests.init.test_real_pass import normalised

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

SHAPE = dict(embed_dim=64, depth=4, num_heads=4, num_classes=10)


def timm_vit(size: int, **kwargs) -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=size, patch_size=4, in_chans=1, **SHAPE, **kwargs)


def deit_distilled(size: int) -> nn.Module:
    from timm.models.deit import VisionTransformerDistilled

    return VisionTransformerDistilled(img_size=size, patch_size=4, in_chans=1, **SHAPE)


def hf_vit(size: int, cls=None) -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=size, patch_size=4, num_channels=1, hidden_size=64, num_hidden_layers=4,
                       num_attention_heads=4, intermediate_size=128, num_labels=10)  # fmt: skip
    return (cls or ViTForImageClassification)(config)


FAMILIES = {
    "timm class token": lambda size: timm_vit(size),
    "timm avg pool, no class token": lambda size: timm_vit(size, class_token=False, global_pool="avg"),
    "timm no_embed_class + 4 registers": lambda size: timm_vit(size, no_embed_class=True, reg_tokens=4),
    "timm qk_norm": lambda size: timm_vit(size, qk_norm=True),
    "timm DeiT distilled": deit_distilled,
    "transformers ViTForImageClassification": hf_vit,
    "transformers ViTModel": lambda size: hf_vit(size, transformers.ViTModel),
}


@pytest.fixture(scope="module")
def batches() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per dataset: 64 training images to initialise with, 64 test images to measure on."""
    out = {}
    fit, test = normalised("digits", 64, 64)
    out["digits"] = tuple(
        F.interpolate(x, size=32, mode="bilinear", align_corners=False) for x in (fit, test)
    )
    if FASHION_DIR.is_dir():
        out["fashion-mnist"] = normalised("fashion-mnist", 64, 64)
    return out


def quiet_initialize(model: nn.Module, scheme: str, images: torch.Tensor, **options) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a low-mass warning fails the test
        return initialize(model, scheme, images=images, seed=0, **options)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_default_impulse_init_puts_most_attention_on_the_target_patch_of_held_apart_images(batches, family):
    for name, (fit, _) in batches.items():
        torch.manual_seed(0)
        report = quiet_initialize(FAMILIES[family](fit.shape[-1]), "impulse", fit)
        held = report["real_pass_held_out"]
        assert held["images"] == 16 and report["real_pass"]["images"] > 0  # the batch's last quarter
        assert held["mean_mass"] >= 0.6, f"{family} on {name}: {held['mean_mass']:.3f}"


def model_maps(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's softmax maps (B, H, T, T) as the model itself computes them: timm's unfused attention
    (the input of attn_drop), transformers' eager attention (output_attentions)."""
    model.eval()
    if hasattr(model, "blocks"):
        maps, handles = [], []
        for block in model.blocks:
            block.attn.fused_attn = False
            handles.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: maps.append(o)))
        with torch.no_grad():
            model(images)
        for handle in handles:
            handle.remove()
        return maps
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    else:  # older transformers
        model.config._attn_implementation = "eager"
    with torch.no_grad():
        return list(model(pixel_values=images, output_attentions=True).attentions)


@pytest.mark.parametrize(
    "family", ["timm class token", "timm qk_norm", "transformers ViTForImageClassification"]
)
def test_reported_held_apart_mass_is_the_mass_of_the_models_own_maps(batches, family):
    fit, _ = batches["digits"]
    torch.manual_seed(0)
    model = FAMILIES[family](32)
    report = quiet_initialize(model, "impulse", fit)
    held = fit[48:]
    measured = report["real_pass_held_out"]["layers"]
    for layer, maps, entry in zip(report["layers"], model_maps(model, held), measured, strict=True):
        prefix = maps.shape[-1] - 64
        for head, figures in zip(layer["heads"], entry["heads"], strict=True):
            target = impulse_conv_matrix(tuple(head["offset"]), (8, 8))  # (N, N) 0/1
            inside = target.sum(-1) > 0
            hits = (maps[:, head["head"], prefix:, prefix:] * target).sum(-1)  # (B, N)
            assert figures["mass"] == pytest.approx(float(hits[:, inside].mean()), abs=1e-5)


def test_prefix_tokens_take_little_of_the_patch_rows_attention(batches):
    fit, _ = batches["digits"]
    for family in ("timm class token", "timm no_embed_class + 4 registers", "transformers ViTModel"):
        torch.manual_seed(0)
        held = quiet_initialize(FAMILIES[family](32), "impulse", fit)["real_pass_held_out"]
        assert held["mean_prefix_key_mass"] < 0.15 and 0 < held["mean_prefix_row_entropy"] <= 1


def test_learned_position_table_is_scaled_by_default_and_the_choice_is_reported_and_switchable(batches):
    fit, _ = batches["digits"]
    torch.manual_seed(0)
    model = timm_vit(32)
    before = model.pos_embed.detach().clone()
    report = quiet_initialize(model, "impulse", fit)
    torch.testing.assert_close(model.pos_embed.detach(), before * POS_EMBED_SCALE)
    assert "multiplied by 18" in report["position"]["pos_embed"]
    kept = timm_vit(32)
    before = kept.pos_embed.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kept as drawn, the maps start near chance: it warns
        report = initialize(kept, "impulse", images=fit, seed=0, learned_pos_embed="keep")
    assert torch.equal(kept.pos_embed.detach(), before) and "kept" in report["position"]["pos_embed"]
    assert report["real_pass_held_out"]["mean_mass"] < 0.2 and "warning" in report["real_pass"]


def test_fixed_position_table_is_left_as_it_is(batches):
    fit, _ = batches["digits"]
    model = timm_vit(32)
    model.pos_embed.requires_grad_(False)
    before = model.pos_embed.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = initialize(model, "impulse", images=fit, seed=0)
    assert torch.equal(model.pos_embed, before) and report["position"]["pos_embed"].startswith("fixed")


@pytest.mark.parametrize("scheme", ["impulse", "mimetic"])
def test_timm_model_built_with_weight_init_skip_is_repaired_not_crashed(batches, scheme):
    fit, _ = batches["digits"]
    torch.manual_seed(0)
    model = timm_vit(32, weight_init="skip")
    with torch.no_grad():
        model.cls_token.fill_(float("nan"))  # what uninitialised memory may hold
    report = initialize(model, scheme, images=fit, seed=0)
    repaired = report["position"]["repaired"] if scheme == "impulse" else report["repaired"]
    assert "cls_token" in repaired and torch.isfinite(model.cls_token).all()
    assert float(model.cls_token.detach().abs().max()) < 1e-3  # timm's own draw: normal, std 1e-6


def qk_products(q_weight: torch.Tensor, k_weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Per head Wq_h Wk_h^T (H, D, D) from (H*d, D) projection weights."""
    d = q_weight.shape[0] // heads
    return torch.stack(
        [q_weight[h * d : (h + 1) * d].T @ k_weight[h * d : (h + 1) * d] for h in range(heads)]
    )


def test_mimetic_init_applies_to_transformers_vit_as_to_a_timm_vit_of_the_same_shape():
    timm_model, hf_model = timm_vit(28), hf_vit(28)
    timm_report = initialize(timm_model, "mimetic", seed=0)
    hf_report = initialize(hf_model, "mimetic", seed=0)
    assert len(timm_report["layers"]) == len(hf_report["layers"])
    for timm_layer, hf_layer in zip(timm_report["layers"], hf_report["layers"], strict=True):
        assert timm_layer == pytest.approx(hf_layer)  # one dict of numbers at a time (pytest 9)
    layers = hf_model.vit.layers if hasattr(hf_model.vit, "layers") else hf_model.vit.encoder.layer
    for block, layer in zip(timm_model.blocks, layers, strict=True):
        inner = 64
        qkv = block.attn.qkv.weight.detach()
        attention = getattr(layer.attention, "attention", layer.attention)  # transformers 4 or 5
        q = getattr(attention, "q_proj", getattr(attention, "query", None))
        k = getattr(attention, "k_proj", getattr(attention, "key", None))
        torch.testing.assert_close(
            qk_products(q.weight.detach(), k.weight.detach(), 4),
            qk_products(qkv[:inner], qkv[inner : 2 * inner], 4),
        )
        assert float(q.bias.detach().abs().max()) == 0 and float(k.bias.detach().abs().max()) == 0


def test_unsupported_model_is_refused_in_one_line_naming_the_supported_ones():
    model = timm.create_model("resnet18", num_classes=10)
    for scheme in ("impulse", "mimetic"):
        with pytest.raises(ConfigError, match="timm VisionTransformer.*transformers ViTModel") as caught:
            initialize(model, scheme)
        assert "\n" not in str(caught.value)
