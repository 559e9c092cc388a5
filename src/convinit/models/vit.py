"""SimpleViT (SPEC section 2): the paper-1 baseline.

patchify -> LN -> Linear -> LN, plus a fixed 2-D sin-cos position embedding P; pre-norm blocks with
bias-free Q/K/V; final LN; mean pooling; linear head. No class token.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.layers import Attention, FeedForward, patch_grid, patchify, posemb_sincos_2d
from convinit.models.registry import register_model


class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(LN(x)), then x + MLP(x) (the MLP holds its own LN)."""

    def __init__(self, dim: int, heads: int, dim_head: int, mlp_dim: int, attn_scale: float | None = None):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads=heads, dim_head=dim_head, attn_scale=attn_scale)
        self.mlp = FeedForward(dim, mlp_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm(x))
        return x + self.mlp(x)


class SimpleViT(nn.Module):
    """The SimpleViT of Beyer et al. as used by paper 1 (SPEC section 2)."""

    def __init__(
        self,
        *,
        num_classes: int,
        img_size: int | tuple[int, int],
        in_chans: int,
        patch_size: int,
        dim: int,
        depth: int,
        heads: int,
        dim_head: int,
        mlp_dim: int,
        attn_scale: float | None = None,
    ):
        super().__init__()
        for name, value in dict(
            dim=dim, depth=depth, heads=heads, dim_head=dim_head, mlp_dim=mlp_dim
        ).items():
            if value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value}")
        self.patch_size = patch_size
        self.grid = patch_grid(img_size, patch_size)  # (rows, cols) of patches
        patch_dim = in_chans * patch_size * patch_size
        self.patch_embed = nn.Sequential(
            nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim), nn.LayerNorm(dim)
        )
        self.register_buffer("pos_embedding", posemb_sincos_2d(*self.grid, dim), persistent=False)
        self.blocks = nn.ModuleList(Block(dim, heads, dim_head, mlp_dim, attn_scale) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(patchify(images, self.patch_size)) + self.pos_embedding  # (B, N, D)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(images).mean(dim=1))


@register_model
def simplevit(
    num_classes: int = 10,
    img_size: int | tuple[int, int] = 32,
    in_chans: int = 3,
    patch_size: int = 2,
    dim: int = 512,
    depth: int = 6,
    heads: int = 8,
    dim_head: int = 64,
    mlp_dim: int = 512,
    attn_scale: float | None = None,
) -> SimpleViT:
    """SimpleViT, paper-1 configuration: D 512, depth 6, 8 heads of 64, MLP 512, patch 2 on 32 px."""
    return SimpleViT(
        num_classes=num_classes,
        img_size=img_size,
        in_chans=in_chans,
        patch_size=patch_size,
        dim=dim,
        depth=depth,
        heads=heads,
        dim_head=dim_head,
        mlp_dim=mlp_dim,
        attn_scale=attn_scale,
    )
