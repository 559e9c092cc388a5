"""`track=[init_quality]`: whether the attention stays as convolutional as the init made it."""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.analysis import register_tracker
from convinit.analysis.init_quality import init_quality

TRACK_IMAGES = 64  # the first 64 of the run's fixed test batch: the init report's batch size, 1/4 the cost


@register_tracker("init_quality")
def init_quality_tracker(model: nn.Module, images: torch.Tensor) -> dict[str, float]:
    """Tracker: `init_quality` on the first 64 images, against the run's impulse targets if it has them."""
    return init_quality(model, images[:TRACK_IMAGES])
