"""Learned position embeddings made strong enough for impulse init, and prefix tokens left unset repaired.

timm and transformers ViTs draw their position embedding truncated-normal with std 0.02. Next to the
patch embedding (std about 1 after the block's LayerNorm) that carries almost no position: a fit on
norm1(x + pos) finds no direction where position outweighs content and the maps stay at chance on real
images (0.02-0.05 target mass, docs/method.md §7). Two remedies, measured on real held-apart images
(`docs/own-models.md`, timm ViT-Ti at 32 px / patch 4 and D 64 depth 4 models on Fashion-MNIST and
digits):

- `scale` (default): multiply the learned table by 18, as the follow-up paper does (`norm_p=18`). Its
  random rows are distinct enough to address each patch: 0.78-0.79 target mass on ViT-Ti with Q/K
  weights 3.3-3.7x their default size, 0.68-0.80 on the D 64 models.
- `sincos`: write the 2-D sin-cos P into the patch rows: 0.61-0.75 on ViT-Ti with weights 11-12x,
  0.68-0.75 on the D 64 models.

`keep` leaves the table as it is (the maps then start at chance; the report warns). A table that does
not train (requires_grad False) is always kept: it is the model's own fixed choice.

timm built with `weight_init="skip"` leaves `pos_embed` and the class/register/distillation tokens as
`torch.empty` memory (zeros or values up to 1e35): such tensors are re-drawn as the library would draw
them, and the report lists them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.attention_sites import position_table, sincos_into_pos_embed
from convinit.models.hf_layout import hf_vit_backbone

POSITION_MODES = ("scale", "sincos", "keep")
POS_EMBED_SCALE = 18.0  # the follow-up paper's norm_p
# the largest factor a learned table (std 0.02) may be scaled by: its entries stay below UNSET_ABOVE,
# where a table reads as uninitialised memory, and far from float overflow in the attention logits
MAX_POS_EMBED_SCALE = 1e3
TOKEN_NAMES = ("cls_token", "reg_token", "dist_token")
UNSET_ABOVE = 1e3  # a drawn embedding or token is never this large; uninitialised memory can be
UNSET_BELOW = 1e-12  # nor all this small (a position table)


def learned_tensors(model: nn.Module) -> dict[str, tuple[torch.Tensor, float]]:
    """name -> (tensor, std the library draws it with) for the position table and prefix tokens."""
    backbone = hf_vit_backbone(model)
    owner = backbone.embeddings if backbone is not None else model
    found = {}
    table = position_table(model)
    if table is not None:
        found["position embedding"] = (table.weight, 0.02)
    for name in TOKEN_NAMES:
        token = getattr(owner, name, None)
        if isinstance(token, torch.Tensor):
            found[name] = (token, 1e-6 if backbone is None and name != "dist_token" else 0.02)
    return found


def repair_unset(model: nn.Module) -> list[str]:
    """Re-draw position tables and prefix tokens holding uninitialised memory; their names."""
    repaired = []
    for name, (tensor, std) in learned_tensors(model).items():
        values = tensor.detach()
        huge = not bool(torch.isfinite(values).all()) or float(values.abs().max()) > UNSET_ABOVE
        empty = name == "position embedding" and float(values.abs().max()) < UNSET_BELOW
        if huge or empty:
            with torch.no_grad():
                nn.init.trunc_normal_(tensor, std=std)  # timm's and transformers' draw
            repaired.append(name)
    return repaired


def check_pos_embed_scale(scale: float, scheme: str) -> None:
    """pos_embed_scale in (0, MAX_POS_EMBED_SCALE]: 1e30 would make the attention logits NaN."""
    if not 0 < scale <= MAX_POS_EMBED_SCALE:
        raise ConfigError(
            f"{scheme} pos_embed_scale must be in (0, {MAX_POS_EMBED_SCALE:g}] (the follow-up paper uses "
            f"{POS_EMBED_SCALE:g}), got {scale!r}"
        )


def prepare_positions(model: nn.Module, mode: str, scale: float = POS_EMBED_SCALE) -> dict[str, Any]:
    """Repair unset tensors, then apply `mode` to a learned position table; the report's `position` entry."""
    if mode not in POSITION_MODES:
        raise ConfigError(
            f"impulse learned_pos_embed must be one of {', '.join(POSITION_MODES)}, got {mode!r}"
        )
    report: dict[str, Any] = {"repaired": repair_unset(model)}
    table = position_table(model)
    if table is None:
        report["pos_embed"] = "none"
    elif not table.learned:
        report["pos_embed"] = "fixed (requires_grad False): kept"
    elif mode == "scale":
        with torch.no_grad():
            table.weight.mul_(scale)
        report["pos_embed"] = f"learned: multiplied by {scale:g} (learned_pos_embed='keep' leaves it)"
    elif mode == "sincos":
        sincos_into_pos_embed(model)
        report["pos_embed"] = "learned: 2-D sin-cos written into its patch rows"
    else:
        report["pos_embed"] = "learned: kept as drawn"
    return report
