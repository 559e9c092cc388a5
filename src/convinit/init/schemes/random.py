"""`random`: the model's own default initialisation, the baseline the other schemes are compared with."""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from convinit.init.registry import register_scheme


@register_scheme("random")
def random_init(model: nn.Module) -> dict[str, Any]:
    """Nothing to do: the model's constructor drew its weights (`initialize` adds the real-pass figures)."""
    return {}
