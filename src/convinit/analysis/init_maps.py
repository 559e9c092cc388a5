"""Attention maps at step 0 beside their impulse-convolution targets (paper 1, Fig. 3 and 5).

`save_init_maps(model, path, report=...)` runs one forward pass with `record_attention`, takes the
attention row of one query patch in each chosen layer and head, and draws it as an image on the patch
grid next to the target row of that head's impulse convolution matrix (from the report that
`initialize(model, "impulse")` returned). A well initialised head shows a single bright patch at the
same place in both panels; a random head shows scattered weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.filters import impulse_conv_matrix
from convinit.models.layers import record_attention
from convinit.system.atomic import atomic_writer


def query_index(query: int | Sequence[int] | None, grid: tuple[int, int]) -> int:
    """A flat patch index from (row, col), a flat index, or None (the centre patch)."""
    rows, cols = grid
    if query is None:
        return (rows // 2) * cols + cols // 2
    if isinstance(query, int):
        index = query
    else:
        row, col = query
        if not (0 <= row < rows and 0 <= col < cols):
            raise ConfigError(f"query patch {tuple(query)} is outside the {rows}x{cols} patch grid")
        index = row * cols + col
    if not 0 <= index < rows * cols:
        raise ConfigError(f"query patch {index} is outside the {rows}x{cols} patch grid")
    return index


def step0_maps(model: nn.Module, images: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Each attention layer's maps for the first image, [(H, N, N)] in layer order.

    Without `images`, one fixed-seed noise image of the model's size (the maps of input-independent
    layers, e.g. qk_input blend with alpha 0 or free, do not depend on it).
    """
    if images is None:
        if not hasattr(model, "img_size") or not hasattr(model, "in_chans"):
            raise ConfigError("pass `images`: this model does not say its img_size and in_chans")
        generator = torch.Generator().manual_seed(0)
        images = torch.randn(1, model.in_chans, *model.img_size, generator=generator)
    was_training = model.training
    model.eval()
    with torch.no_grad(), record_attention(model) as maps:
        model(images[:1])
    model.train(was_training)
    if not maps:
        raise ConfigError(f"{type(model).__name__} records no attention maps (no convinit attention layers)")
    return [m[0].float().cpu() for m in maps.values()]


def save_init_maps(
    model: nn.Module,
    path: str | Path,
    *,
    report: dict[str, Any] | None = None,
    query: int | Sequence[int] | None = None,
    layers: Sequence[int] | None = None,
    images: torch.Tensor | None = None,
) -> Path:
    """Save a PNG of each chosen layer's attention rows for `query` beside the impulse targets.

    report: the dict `initialize(model, "impulse")` returned (for the target offsets); without it only
    the maps are drawn. layers: indices to draw (default: all). Returns the path written.
    """
    from matplotlib.figure import Figure  # no pyplot: renders with Agg, leaves the user's backend alone

    grid = tuple(model.grid)
    index = query_index(query, grid)
    maps = step0_maps(model, images)
    chosen = list(range(len(maps))) if layers is None else list(layers)
    for layer in chosen:
        if not 0 <= layer < len(maps):
            raise ConfigError(f"layer {layer} does not exist; the model has {len(maps)} attention layers")
    heads = maps[0].shape[0]
    panels = 2 if report is not None else 1
    fig = Figure(figsize=(1.6 * heads * panels, 1.7 * len(chosen)))
    axes = fig.subplots(len(chosen), heads * panels, squeeze=False)
    qrow, qcol = divmod(index, grid[1])
    for row, layer in enumerate(chosen):
        for head in range(heads):
            ax = axes[row, head * panels]
            ax.imshow(maps[layer][head, index].reshape(grid).numpy(), cmap="viridis", vmin=0)
            ax.set_title(f"L{layer} h{head}", fontsize=7)
            if report is not None:
                offset = tuple(report["layers"][layer]["heads"][head]["offset"])
                target = impulse_conv_matrix(offset, grid)[index]  # (N,), all 0 if it leaves the grid
                mass = float(maps[layer][head, index] @ target)
                target = target.reshape(grid)
                ax.set_title(f"L{layer} h{head} mass {mass:.2f}", fontsize=7)
                tax = axes[row, head * panels + 1]
                tax.imshow(target.numpy(), cmap="viridis", vmin=0, vmax=1)
                tax.set_title(f"target {offset}", fontsize=7)
        for ax in axes[row]:
            ax.plot(qcol, qrow, marker="+", color="red", markersize=6)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(f"attention of query patch ({qrow}, {qcol}) at step 0", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, "wb") as f:  # never through a link the folder may hold
        fig.savefig(f, format=path.suffix.lstrip(".") or None, dpi=120)
    return path
