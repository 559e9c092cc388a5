"""How convolutional the attention is, followed through training (paper 1; docs/method.md §3 and §7).

An impulse init is measured once, at step 0, by its `init_report.json`. Whether the bias lasts is a
question about every later step: `track=[init_quality]` measures, on a fixed batch of held-apart test
images and real forward passes, per layer:

- `target_mass`: the mean attention weight on each head's target offset (impulse runs: the offsets of
  the run's init report), over queries whose target lies inside the grid (the figure the init report
  calls `mean_mass`, computed the same way);
- `best_offset_mass`: the same mass for the single offset (dy, dx), |dy|, |dx| <= 2 (paper 1's 5 x 5
  kernel), that gets the most of it, per head; defined for every init, so a random or mimetic
  baseline, or a head that moved to another offset, is measured on the same scale;
- `entropy`: row entropy / log(keys), 1 for uniform maps, 0 for one-hot maps;
- `worst_row_mass` and `rows_on_target` (impulse runs): the target mass at the query row where it is
  smallest, and the share of rows whose largest weight is the target (`convinit.init.targets.row_figures`):
  a convolution is the same map at every position, which a mean over rows can hide.

Which maps: convinit SimpleViTs and timm-layout ViTs through the maps their Q/K inputs give on real
images (`convinit.init.measure`, the code the init report uses); ConViT's GPSA layers through their
positional part softmax(pos_proj(r)) (the same for every image). The trainer calls it at every
evaluation (step 0 and the end included) and every `track_every` steps.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import torch
import torch.nn as nn

from convinit.analysis.locality import attention_layers, attention_slots_of, model_grid, slot_attention
from convinit.errors import ConfigError
from convinit.init.targets import Targets, row_figures, target_mass
from convinit.models.filters import kernel_offsets
from convinit.models.layers import record_attention

BEST_OFFSET_KERNEL = 5  # candidate offsets for the best-offset mass: paper 1's 5 x 5 kernel


def report_offsets(report: dict[str, Any] | None) -> list[list[tuple[int, int]]] | None:
    """Per layer, per head target offsets from an init report (impulse), else None."""
    layers = (report or {}).get("layers")
    if not layers:
        return None
    try:
        return [[tuple(head["offset"]) for head in layer["heads"]] for layer in layers]
    except (KeyError, TypeError):
        return None


def measured_maps(model: nn.Module, images: torch.Tensor) -> list[tuple[torch.Tensor, tuple[int, int]]]:
    """[(maps (B or 1, H, T, T), patch grid)] per attention layer, on real forward passes of `images`.

    Layers that record their maps (convinit's) give them from one forward pass; timm-layout ViTs
    through their real Q/K inputs (`convinit.init.measure`); ConViT's GPSA its positional part.
    """
    layers = attention_layers(model)
    gpsa = [m for _, m in layers if hasattr(m, "positional_attention")]
    if gpsa:
        return [(m.positional_attention().float()[None], tuple(m.grid)) for m in gpsa]
    if layers:
        with record_attention(model) as maps:
            model(images)
        return [(m.float(), model_grid(model, m.shape[-1])) for m in maps.values()]
    return slot_maps(model, images)


def slot_maps(model: nn.Module, images: torch.Tensor) -> list[tuple[torch.Tensor, tuple[int, int]]]:
    """The maps of a model without recording layers (timm), from the Q/K inputs its layers receive."""
    slots = attention_slots_of(model)
    if not slots:
        raise ConfigError(
            f"track=init_quality measures attention maps; {type(model).__name__} has none it can read "
            f"(convinit ViTs, timm-layout ViTs and ConViT): drop init_quality from track"
        )
    maps = slot_attention(model, slots, images)
    return [(m, tuple(slot.grid)) for slot, m in zip(slots, maps, strict=True)]


@lru_cache(maxsize=16)
def candidate_targets(grid: tuple[int, int], heads: int) -> tuple[Targets, ...]:
    """Every head aimed at the same candidate offset, one `Targets` per offset of the 5 x 5 kernel."""
    return tuple(Targets.build([offset] * heads, grid) for offset in kernel_offsets(BEST_OFFSET_KERNEL))


def offset_masses(maps: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Mass on each candidate offset of the 5 x 5 kernel, per head: (H, 25), averaged over images."""
    patches = grid[0] * grid[1]
    rows = maps[..., -patches:, -patches:]  # (B, H, N, N) patch queries and keys; prefix keys off-target
    mean = rows.mean(0).cpu()  # (H, N, N): the mass is linear in the maps
    return torch.stack([target_mass(mean, t) for t in candidate_targets(grid, rows.shape[1])], dim=-1)


def layer_quality(
    maps: torch.Tensor, grid: tuple[int, int], offsets: list[tuple[int, int]] | None
) -> dict[str, list[float]]:
    """Per head of one layer: best-offset mass, entropy and, with target offsets, target mass."""
    patches = grid[0] * grid[1]
    rows = maps[..., -patches:, :]  # (B, H, N, T): patch queries over all keys
    entropy = -(rows * rows.clamp_min(1e-30).log()).sum(-1) / math.log(maps.shape[-1])
    out = {
        "best_offset_mass": offset_masses(maps, grid).max(-1).values.tolist(),
        "entropy": entropy.mean(dim=(0, 2)).cpu().tolist(),
    }
    if offsets is not None and len(offsets) == maps.shape[1]:
        prefix = maps.shape[-1] - patches
        targets = Targets.build(list(offsets), grid)
        mean = rows[..., prefix:].mean(0).cpu()  # (H, N, N) patch keys, averaged over images
        out["target_mass"] = target_mass(mean, targets).tolist()
        out.update(row_figures(mean, targets.keys, targets.inside))
    return out


@torch.no_grad()
def init_quality(
    model: nn.Module, images: torch.Tensor, offsets: list[list[tuple[int, int]]] | None = None
) -> dict[str, float]:
    """Keys `init_quality/{figure}` (mean over layers and heads) and `init_quality/L{l}/{figure}`.

    offsets: per layer, per head target offsets; default: those of `model.init_report` (impulse runs).
    """
    if offsets is None:
        offsets = report_offsets(getattr(model, "init_report", None))
    was_training = model.training
    model.eval()
    try:
        layers = measured_maps(model, images)
    finally:
        model.train(was_training)
    if offsets is not None and len(offsets) != len(layers):
        offsets = None  # the init reported other layers (e.g. ConViT's GPSA): no targets to compare with
    out: dict[str, float] = {}
    per_head: dict[str, list[float]] = {}
    for index, (maps, grid) in enumerate(layers):
        figures = layer_quality(maps, grid, offsets and offsets[index])
        for key, values in figures.items():
            out[f"init_quality/L{index}/{key}"] = sum(values) / len(values)
            per_head.setdefault(key, []).extend(values)
    for key, values in per_head.items():
        out[f"init_quality/{key}"] = sum(values) / len(values)
    return out
