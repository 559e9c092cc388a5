"""`random`: the model's own default initialisation, the baseline the other schemes are compared with."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.attention_sites import attention_slots
from convinit.init.measure import HELD_OUT, check_held_out, real_pass_measured
from convinit.init.registry import register_scheme


def check_random_options(options: dict[str, Any]) -> None:
    """held_out's value (run by `init_spec`, before any model exists)."""
    if "held_out" in options:
        check_held_out(options["held_out"], "random")


@register_scheme("random", check=check_random_options)
def random_init(
    model: nn.Module, images: torch.Tensor | None = None, held_out: float = HELD_OUT
) -> dict[str, Any]:
    """Nothing to do: the model's constructor drew its weights. With `images`, the real-pass figures
    every scheme reports (`real_pass`, `real_pass_held_out`, as mimetic's), for models with attention."""
    if images is None:
        return {}
    try:
        slots = attention_slots(model, "measure")
    except ConfigError:  # no attention the schemes reach (e.g. ConvMixer): no figures
        return {}
    return real_pass_measured(model, slots, images, held_out)
