"""DeiT: the plain ViT with a class token that ConViT is compared with (SPEC section 5).

Every block is MHSA; the class token is prepended before the first block and the learnable position
embedding covers it too. Widths follow the DeiT paper (Ti: D 192, 3 heads; S: D 384, 6 heads; B: D
768, 12 heads; 64 per head). Module names follow timm's `vision_transformer.py`, so a timm DeiT state
dict loads unchanged. For a comparison that differs from a ConViT *only* in GPSA, build the ConViT
preset with `local_up_to_layer=0` (the paper's ablation row "DeiT"), which keeps its heads and width.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.convit import LN_EPS, MHSA, Block, PatchEmbed, drop_path_rates, init_linear
from convinit.models.layers import pair
from convinit.models.pretrained import PretrainedMixin
from convinit.models.registry import register_model


class DeiT(PretrainedMixin, nn.Module):
    """ViT with a class token, learnable position embedding, pre-norm blocks, LN eps 1e-6 (DeiT/timm)."""

    def __init__(
        self,
        *,
        num_classes: int = 1000,
        img_size: int | tuple[int, int] = 224,
        in_chans: int = 3,
        patch_size: int = 16,
        embed_dim: int = 192,
        depth: int = 12,
        num_heads: int = 3,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_path_rate: float = 0.0,
    ):
        super().__init__()
        if not 0.0 <= drop_path_rate < 1.0:
            raise ConfigError(f"drop_path_rate must be in [0, 1), got {drop_path_rate}")
        self.num_classes = num_classes
        self.img_size = pair(img_size)
        self.in_chans = in_chans
        self.patch_size = patch_size
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.grid = self.patch_embed.grid  # (rows, cols)
        num_patches = self.grid[0] * self.grid[1]
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + num_patches, embed_dim))
        rates = drop_path_rates(drop_path_rate, depth)
        self.blocks = nn.ModuleList(
            Block(embed_dim, MHSA(embed_dim, num_heads, qkv_bias=qkv_bias), mlp_ratio, rates[i])
            for i in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim, eps=LN_EPS)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)  # timm's ViT init
        if isinstance(self.head, nn.Linear):
            init_linear(self.head)

    def no_weight_decay(self) -> set[str]:
        """Parameters the DeiT recipe excludes from weight decay (besides 1-D ones)."""
        return {"pos_embed", "cls_token"}

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)  # (B, N, D)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed  # (B, 1 + N, D)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(images)[:, 0])


@register_model
def deit_tiny(
    num_classes: int = 1000,
    img_size: int | tuple[int, int] = 224,
    in_chans: int = 3,
    patch_size: int = 16,
    embed_dim: int = 192,
    num_heads: int = 3,
    depth: int = 12,
    drop_path_rate: float = 0.0,
) -> DeiT:
    """DeiT-Ti: D 192, 3 heads (ImageNet top-1 72.2)."""
    return DeiT(**locals())


@register_model
def deit_small(
    num_classes: int = 1000,
    img_size: int | tuple[int, int] = 224,
    in_chans: int = 3,
    patch_size: int = 16,
    embed_dim: int = 384,
    num_heads: int = 6,
    depth: int = 12,
    drop_path_rate: float = 0.0,
) -> DeiT:
    """DeiT-S: D 384, 6 heads (top-1 79.8)."""
    return DeiT(**locals())


@register_model
def deit_base(
    num_classes: int = 1000,
    img_size: int | tuple[int, int] = 224,
    in_chans: int = 3,
    patch_size: int = 16,
    embed_dim: int = 768,
    num_heads: int = 12,
    depth: int = 12,
    drop_path_rate: float = 0.0,
) -> DeiT:
    """DeiT-B: D 768, 12 heads (top-1 81.8)."""
    return DeiT(**locals())


@register_model
def deit_tiny_patch2_32(
    num_classes: int = 10,
    img_size: int | tuple[int, int] = 32,
    in_chans: int = 3,
    patch_size: int = 2,
    embed_dim: int = 192,
    num_heads: int = 3,
    depth: int = 12,
    drop_path_rate: float = 0.0,
) -> DeiT:
    """DeiT-Ti on 32 px images with 2 px patches (the counterpart of convit_tiny_patch2_32)."""
    return DeiT(**locals())


@register_model
def deit_tiny_patch4_32(
    num_classes: int = 10,
    img_size: int | tuple[int, int] = 32,
    in_chans: int = 3,
    patch_size: int = 4,
    embed_dim: int = 192,
    num_heads: int = 3,
    depth: int = 12,
    drop_path_rate: float = 0.0,
) -> DeiT:
    """DeiT-Ti on 32 px images with 4 px patches (the counterpart of convit_tiny_patch4_32)."""
    return DeiT(**locals())
