"""`track=[nonlocality]`: how far, in patches, each layer and head attends, followed through training."""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.analysis import register_tracker
from convinit.analysis.locality import nonlocality


@register_tracker("nonlocality")
def nonlocality_tracker(model: nn.Module, images: torch.Tensor) -> dict[str, float]:
    """Per-epoch tracker: `nonlocality(model, images)` (keys nonlocality/L{l} and nonlocality/L{l}/H{h})."""
    return nonlocality(model, images)
