"""DeiT comparison ViT (docs/method.md §5): forward, recording path, timm parity, presets."""

from __future__ import annotations

import pytest
import torch

from convinit.models import create_model, record_attention
from convinit.models.registry import model_arguments


def small_deit(**overrides):
    torch.manual_seed(0)
    args = dict(num_classes=7, img_size=16, in_chans=1, patch_size=4, embed_dim=32, num_heads=4, depth=2)
    return create_model("deit_tiny_patch4_32", **{**args, **overrides})


def test_deit_forward_gives_logits_from_the_class_token():
    model = small_deit()
    assert model.pos_embed.shape == (1, 17, 32)  # the position embedding covers the class token
    logits = model(torch.randn(3, 1, 16, 16))
    assert logits.shape == (3, 7)
    logits.sum().backward()
    assert model.cls_token.grad is not None and model.pos_embed.grad is not None


def test_deit_fast_path_matches_recorded_path():
    model = small_deit().eval()
    images = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        fast = model(images)
        with record_attention(model) as maps:
            explicit = model(images)
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-5)
    assert [tuple(m.shape) for m in maps.values()] == [(2, 4, 17, 17)] * 2


def test_deit_accepts_rectangular_images():
    model = small_deit(img_size=(8, 16))
    assert model.grid == (2, 4)
    assert model(torch.randn(1, 1, 8, 16)).shape == (1, 7)


def test_timm_deit_state_dict_gives_same_logits():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    reference = timm.create_model("deit_tiny_patch16_224", pretrained=False).eval()
    model = create_model("deit_tiny", num_classes=1000, img_size=224).eval()
    model.load_state_dict(reference.state_dict())
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert (model(images) - reference(images)).abs().max() < 1e-4


def test_deit_presets_have_the_deit_widths():
    widths = {"deit_tiny": (192, 3), "deit_small": (384, 6), "deit_base": (768, 12),
              "deit_tiny_patch2_32": (192, 3), "deit_tiny_patch4_32": (192, 3)}  # fmt: skip
    for name, (dim, heads) in widths.items():
        args = model_arguments(name)
        defaults = (args["embed_dim"].default, args["num_heads"].default, args["depth"].default)
        assert defaults == (dim, heads, 12)
    assert create_model("deit_tiny_patch2_32", num_classes=10, img_size=32).grid == (16, 16)
