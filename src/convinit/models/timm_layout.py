"""timm-layout ViTs recognised by their attributes (timm `VisionTransformer`, `VisionTransformerDistilled`,
Eva, convinit's `deit`), so that timm stays an optional dependency: where the blocks, attention and patch
grid are, for the init schemes (`convinit.init.attention_sites`) and the conversions
(`convinit.models.convert`).
"""

from __future__ import annotations

import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.filters import Grid
from convinit.models.token_grid import token_grid


def is_timm_layout(model: nn.Module) -> bool:
    """A ViT with timm's layout: blocks[i].attn.qkv fused (3*H*d, D), norm1, and a pos_embed attribute
    (a tensor, or None for a model built with pos_embed='none')."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Sequential | nn.ModuleList) or len(blocks) == 0:
        return False
    if not hasattr(model, "pos_embed") or not hasattr(model, "patch_embed"):
        return False
    for block in blocks:
        attn = getattr(block, "attn", None)
        if not isinstance(getattr(attn, "qkv", None), nn.Linear) or not hasattr(attn, "num_heads"):
            return False
        if not hasattr(block, "norm1") or not isinstance(getattr(attn, "proj", None), nn.Linear):
            return False
    return True


def timm_grid(model: nn.Module) -> Grid:
    grid = token_grid(model)
    if grid is None:
        raise ConfigError(
            "this timm-layout model exposes no patch grid (model.grid or patch_embed.grid_size)"
        )
    return grid
