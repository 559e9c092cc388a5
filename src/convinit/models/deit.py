"""DeiT: the plain ViT with a class token that ConViT is compared with (docs/method.md §5).

Every block is MHSA; the class token is prepended before the first block and the learnable position
embedding covers it too. Widths follow the DeiT paper (Ti: D 192, 3 heads; S: D 384, 6 heads; B: D
768, 12 heads; 64 per head). Module names follow timm's `vision_transformer.py`, so a timm DeiT state
dict loads unchanged. For a comparison that differs from a ConViT *only* in GPSA, build the ConViT
preset with `local_up_to_layer=0` (the paper's ablation row "DeiT"), which keeps its heads and width.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.models.layers import MHSA, Block, ClassTokenViT, PatchEmbed, drop_path_rates, init_linear
from convinit.models.pretrained import PretrainedMixin
from convinit.models.registry import FAMILIES, Family


class DeiT(PretrainedMixin, ClassTokenViT):
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
        rates = drop_path_rates(drop_path_rate, depth)
        patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        # the class token is prepended before the first block
        super().__init__(patch_embed, pos_embed_covers_cls=True)
        self.blocks = nn.ModuleList(
            Block(embed_dim, MHSA(embed_dim, num_heads, qkv_bias=qkv_bias), mlp_ratio, rates[i])
            for i in range(depth)
        )
        self.add_head(embed_dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)  # timm's ViT init
        if isinstance(self.head, nn.Linear):
            init_linear(self.head)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)  # (B, N, D)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed  # (B, 1 + N, D)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


# the arguments a DeiT preset lets its caller set, in the order a refusal lists them (mlp_ratio: to match
# a user's ViT); qkv_bias stays at DeiT's (timm's) default in every preset (build DeiT to change it)
PRESET_OPTIONS = ("patch_size", "embed_dim", "num_heads", "depth", "mlp_ratio", "drop_path_rate")
FAMILIES.add("deit", Family(DeiT, options=PRESET_OPTIONS))
