"""GPSA gates g_h = sigmoid(lambda_h) per layer and head (ConViT paper, Fig. 6; SPEC section 5).

g near 1: the head attends by position (a soft convolution); g near 0: by content only. The paper
sees late GPSA layers go to ~0 during training while early layers keep positional heads.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.analysis import register_tracker
from convinit.analysis.locality import attention_layers


def gate_values(model: nn.Module) -> dict[int, torch.Tensor]:
    """{layer index: (H,) gates} for every gated attention layer (index as in `attention_layers`)."""
    return {
        index: torch.sigmoid(layer.gating_param.detach().float()).cpu()
        for index, (_, layer) in enumerate(attention_layers(model))
        if hasattr(layer, "gating_param")
    }


@register_tracker("gates")
def gates_tracker(model: nn.Module, images: torch.Tensor) -> dict[str, float]:
    """Per-epoch tracker: `gate/L{l}/H{h}` for each GPSA layer; the images are not needed."""
    return {
        f"gate/L{index}/H{head}": value
        for index, gates in gate_values(model).items()
        for head, value in enumerate(gates.tolist())
    }
