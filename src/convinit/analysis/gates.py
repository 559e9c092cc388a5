"""GPSA gates g_h = sigmoid(lambda_h) per layer and head (ConViT paper, Fig. 6; docs/method.md §5).

g near 1: the head attends by position (a soft convolution); g near 0: by content only. The paper
sees late GPSA layers go to ~0 during training while early layers keep positional heads.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from convinit.analysis.locality import attention_layers


def gate_values(model: nn.Module) -> dict[int, torch.Tensor]:
    """{layer index: (H,) gates} for every gated attention layer (index as in `attention_layers`)."""
    return {
        index: torch.sigmoid(layer.gating_param.detach().float()).cpu()
        for index, (_, layer) in enumerate(attention_layers(model))
        if hasattr(layer, "gating_param")
    }
