"""`track=[gates]`: ConViT's GPSA gates per layer and head, followed through training."""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.analysis import register_tracker
from convinit.analysis.gates import gate_values


@register_tracker("gates")
def gates_tracker(model: nn.Module, images: torch.Tensor) -> dict[str, float]:
    """Per-epoch tracker: `gate/L{l}/H{h}` for each GPSA layer; the images are not needed."""
    return {
        f"gate/L{index}/H{head}": value
        for index, gates in gate_values(model).items()
        for head, value in enumerate(gates.tolist())
    }
