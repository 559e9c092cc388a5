"""ConViT (docs/method.md §5): GPSA blocks (`convinit.models.gpsa`) on the patches, then MHSA blocks and
the class token.

Module and parameter names follow timm's `convit.py` (`patch_embed.proj`, `pos_embed`, `cls_token`,
`blocks.i.norm1/attn/norm2/mlp.fc1/mlp.fc2`, and GPSA's own), so a timm ConViT state dict loads unchanged
and gives the same logits.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.gpsa import GPSA
from convinit.models.layers import MHSA, Block, ClassTokenViT, PatchEmbed, drop_path_rates, init_linear
from convinit.models.pretrained import PretrainedMixin
from convinit.models.registry import FAMILIES, Family


class ConViT(PretrainedMixin, ClassTokenViT):
    """ConViT (docs/method.md §5): `local_up_to_layer` GPSA blocks on patches, then MHSA blocks + class token.

    A learnable absolute position embedding is added to the patches; the class token (no position
    embedding) is concatenated just before the first MHSA block, whose output at the class token
    feeds the head. `embed_dim` is the total width D (timm's ConVit takes the width per head).
    """

    def __init__(
        self,
        *,
        num_classes: int = 1000,
        img_size: int | tuple[int, int] = 224,
        in_chans: int = 3,
        patch_size: int = 16,
        embed_dim: int = 192,
        depth: int = 12,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        local_up_to_layer: int = 10,
        locality_strength: float = 1.0,
        use_local_init: bool = True,
        partial_local_init: bool = False,
        freeze_gate: bool = False,
        freeze_gpsa: bool = False,
        drop_path_rate: float = 0.0,
    ):
        if not 0 <= local_up_to_layer < depth:
            raise ConfigError(
                f"local_up_to_layer must be in [0, depth) = [0, {depth}), got {local_up_to_layer}; "
                f"at least one MHSA block must read the class token"
            )
        rates = drop_path_rates(drop_path_rate, depth)
        patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        # the class token joins late, without a position
        super().__init__(patch_embed, pos_embed_covers_cls=False)
        self.local_up_to_layer = local_up_to_layer
        self.blocks = nn.ModuleList()
        for i in range(depth):
            if i < local_up_to_layer:
                attn = GPSA(
                    embed_dim,
                    num_heads,
                    self.grid,
                    locality_strength=locality_strength,
                    use_local_init=use_local_init,
                    partial_local_init=partial_local_init,
                    freeze_gate=freeze_gate,
                    freeze=freeze_gpsa,
                )
            else:
                attn = MHSA(embed_dim, num_heads)
            self.blocks.append(Block(embed_dim, attn, mlp_ratio, rates[i]))
        self.add_head(embed_dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        if isinstance(self.head, nn.Linear):
            init_linear(self.head)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images) + self.pos_embed  # (B, N, D)
        for i, block in enumerate(self.blocks):
            if i == self.local_up_to_layer:
                x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)  # (B, 1 + N, D)
            x = block(x)
        return self.norm(x)


def gpsa_layers(model: nn.Module) -> list[GPSA]:
    """The model's GPSA modules in forward order."""
    return [m for m in model.modules() if isinstance(m, GPSA)]


# the arguments a ConViT preset lets its caller set, in the order a refusal lists them (mlp_ratio: to
# match a user's ViT); partial_local_init stays at ConViT's default in every preset (build ConViT for it)
PRESET_OPTIONS = (
    "patch_size", "embed_dim", "num_heads", "depth", "mlp_ratio", "local_up_to_layer", "locality_strength",
    "use_local_init", "freeze_gate", "freeze_gpsa", "drop_path_rate",
)  # fmt: skip
FAMILIES.add("convit", Family(ConViT, options=PRESET_OPTIONS))
