"""`scaled-position`: the control of impulse init on models with a learned position table.

On timm and transformers ViTs impulse init does two things: it first prepares the learned position
table (multiplies it by 18, `convinit.init.positions`), then fits Q/K so the maps start as
convolutions. This scheme does the first step exactly as impulse does and nothing else: the attention
keeps the model's own random weights. Trained beside `random` and `impulse` on the same seeds, it says
how much of impulse's gain comes from the stronger position table alone and how much from the fitted
attention (docs/method.md §3).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.attention_sites import attention_slots, position_table
from convinit.init.measure import HELD_OUT, check_held_out, real_pass_measured
from convinit.init.positions import POS_EMBED_SCALE, POSITION_MODES, check_pos_embed_scale, prepare_positions
from convinit.init.registry import register_scheme


def check_scaled_position_options(options: dict[str, Any]) -> None:
    """The values of scaled-position's options that their types let through (run by `init_spec`)."""
    mode = options.get("learned_pos_embed", "scale")
    if mode not in POSITION_MODES or mode == "keep":
        raise ConfigError(f"scaled-position learned_pos_embed must be 'scale' or 'sincos', got {mode!r}")
    if "pos_embed_scale" in options:
        check_pos_embed_scale(options["pos_embed_scale"], "scaled-position")
    if "held_out" in options:
        check_held_out(options["held_out"], "scaled-position")


@register_scheme("scaled-position", check=check_scaled_position_options)
def scaled_position_init(
    model: nn.Module,
    *,
    learned_pos_embed: str = "scale",
    pos_embed_scale: float = POS_EMBED_SCALE,
    images: torch.Tensor | None = None,
    held_out: float = HELD_OUT,
) -> dict[str, Any]:
    """Prepare the learned position table as impulse init does (learned_pos_embed "scale": x 18, or
    "sincos"), leave every attention weight as drawn. Refuses models without a learned table, where it
    would be `random` under another name. With `images`, the real-pass figures every scheme reports."""
    slots = attention_slots(model, "scaled-position")  # refuses unsupported models before any change
    table = position_table(model)
    if table is None or not table.learned:
        raise ConfigError(
            "scaled-position init prepares a learned position table, but this model has "
            f"{'none' if table is None else 'a fixed one'}: it would be init=random under another name"
        )
    report = {"position": prepare_positions(model, learned_pos_embed, pos_embed_scale)}
    if images is not None:
        report.update(real_pass_measured(model, slots, images, held_out))
    return report
