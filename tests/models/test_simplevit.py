"""SimpleViT (docs/method.md §2) and the registry."""

from __future__ import annotations

import math

import pytest
import torch

from convinit.errors import ConfigError
from convinit.models import create_model, list_models, record_attention
from convinit.models.layers import patchify, posemb_sincos_2d


def test_simplevit_is_registered_with_paper_configuration():
    assert "simplevit" in list_models()
    model = create_model("simplevit", num_classes=10)
    assert len(model.blocks) == 6 and model.grid == (16, 16)
    attn = model.blocks[0].attn
    assert attn.heads == 8 and attn.dim_head == 64 and attn.scale == pytest.approx(64**-0.5)
    assert model.pos_embedding.shape == (256, 512)
    assert model.blocks[0].mlp.net[1].out_features == 512


def test_sincos_embedding_matches_the_formula():
    rows, cols, dim = 3, 4, 16
    pe = posemb_sincos_2d(rows, cols, dim)
    q = dim // 4
    omega = [1.0 / 10000 ** (i / (q - 1)) for i in range(q)]
    token = 1 * cols + 2  # row y=1, column x=2
    expected = [math.sin(2 * w) for w in omega] + [math.cos(2 * w) for w in omega]
    expected += [math.sin(1 * w) for w in omega] + [math.cos(1 * w) for w in omega]
    assert torch.allclose(pe[token], torch.tensor(expected), atol=1e-6)


def test_patchify_orders_patches_row_major_and_pixels_row_major():
    images = torch.arange(2 * 4 * 4, dtype=torch.float32).reshape(1, 2, 4, 4)
    patches = patchify(images, 2)  # (1, 4, 8)
    assert patches.shape == (1, 4, 8)
    # patch 1 is the top-right 2x2 block; its first pixel is (row 0, col 2), channels last
    assert patches[0, 1, :2].tolist() == [images[0, 0, 0, 2].item(), images[0, 1, 0, 2].item()]


def test_recorded_attention_path_equals_sdpa_path():
    torch.manual_seed(0)
    model = create_model(
        "simplevit",
        num_classes=5,
        img_size=8,
        in_chans=1,
        patch_size=2,
        dim=32,
        depth=2,
        heads=2,
        dim_head=16,
        mlp_dim=32,
    ).eval()
    x = torch.randn(3, 1, 8, 8)
    fast = model(x)
    with record_attention(model) as maps:
        explicit = model(x)
    assert torch.allclose(fast, explicit, atol=1e-5)
    assert set(maps) == {"blocks.0.attn", "blocks.1.attn"}
    attention = maps["blocks.0.attn"]
    assert attention.shape == (3, 2, 16, 16)
    assert torch.allclose(attention.sum(-1), torch.ones(3, 2, 16))


def test_unknown_model_and_argument_are_config_errors():
    with pytest.raises(ConfigError, match="unknown model 'vit_huge'"):
        create_model("vit_huge")
    with pytest.raises(ConfigError, match="takes no argument depthh"):
        create_model("simplevit", depthh=3)


def test_patch_size_that_does_not_tile_the_image_is_rejected():
    with pytest.raises(ConfigError, match="patch_size 3 does not divide the image size 32x32"):
        create_model("simplevit", patch_size=3)


def test_model_records_its_name_and_arguments():
    model = create_model("simplevit", num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=32)
    assert model.model_name == "simplevit"
    assert model.model_kwargs["dim"] == 32 and model.model_kwargs["num_classes"] == 3
