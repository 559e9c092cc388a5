"""A ViT's patch grid, found one way for every layout convinit handles: convinit's models (`model.grid`),
timm's (`patch_embed.grid_size`) and transformers' ViTs (their embeddings' image and patch sizes)."""

from __future__ import annotations

import torch.nn as nn

from convinit.models.filters import Grid
from convinit.models.hf_layout import hf_grid, hf_vit_backbone


def token_grid(model: nn.Module) -> Grid | None:
    """(rows, cols) of `model`'s patch grid, or None when it exposes none (a CNN, an unknown layout)."""
    grid = getattr(model, "grid", None) or getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if grid is None and (backbone := hf_vit_backbone(model)) is not None:
        grid = hf_grid(backbone)
    return None if grid is None else (int(grid[0]), int(grid[1]))
