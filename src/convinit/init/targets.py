"""Impulse targets of one layer and how well a map hits them (docs/method.md §3 and §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from convinit.models.filters import (
    Grid,
    Offset,
    centre_first_offsets,
    grid_coords,
    impulse_conv_matrix,
    random_offsets,
    target_keys,
)


def layer_offsets(mode: str, kernel_size: int, layer: int, heads: int, generator=None) -> list[Offset]:
    """The H target offsets of one layer (docs/method.md §3 and §7).

    random: uniform over the k*k taps (paper 1), a fresh draw per call. centre_first: the centre-first
    order cycled by layer * heads + head, so that deeper layers use the other offsets.
    """
    if mode == "random":
        return random_offsets(heads, kernel_size, generator)
    order = centre_first_offsets(kernel_size)
    return [order[(layer * heads + head) % len(order)] for head in range(heads)]


@dataclass
class Targets:
    """Target maps of one layer's heads: T (H, N, N), target key per query (H, N), inside grid (H, N)."""

    offsets: list[Offset]
    maps: torch.Tensor
    keys: torch.Tensor
    inside: torch.Tensor

    @classmethod
    def build(cls, offsets: list[Offset], grid: Grid) -> Targets:
        keys, inside = zip(*(target_keys(o, grid) for o in offsets), strict=True)
        maps = torch.stack([impulse_conv_matrix(o, grid) for o in offsets])
        return cls(offsets, maps, torch.stack(keys), torch.stack(inside))

    def bump(self, width: float, grid: Grid) -> Targets:
        """The same heads with smooth target logits exp(-|key - (query + offset)|^2 / (2 width^2)).

        A one-hot T projected onto the few position directions a fit keeps (7 of 64 on the 8x8 sin-cos
        grid with content) spreads, and at some queries its peak lands a patch off; a bump one or two
        patches wide is mostly made of the low frequencies those directions carry, so its peak stays on
        the target (docs/method.md §7).
        """
        coords = grid_coords(grid).double()  # (N, 2)
        maps = []
        for offset in self.offsets:
            wanted = coords + torch.tensor(offset, dtype=torch.float64)  # (N, 2) per query
            squared = (coords[None] - wanted[:, None]).pow(2).sum(-1)  # (N, N)
            maps.append(torch.exp(-squared / (2 * width**2)))
        return Targets(self.offsets, torch.stack(maps).to(self.maps.dtype), self.keys, self.inside)

    def select(self, heads: list[int]) -> Targets:
        """The targets of some heads only."""
        return Targets(
            [self.offsets[h] for h in heads], self.maps[heads], self.keys[heads], self.inside[heads]
        )


def target_mass(maps: torch.Tensor, targets: Targets) -> torch.Tensor:
    """Mean attention weight on the target key over rows whose target is inside the grid. (..., H)"""
    hit = maps.gather(-1, targets.keys[..., None].expand(*maps.shape[:-1], 1))[..., 0]  # (..., H, N)
    inside = targets.inside.to(maps.dtype)
    return (hit * inside).sum(-1) / inside.sum(-1).clamp_min(1)


def map_quality(maps: torch.Tensor, targets: Targets) -> dict[str, list[float]]:
    """Per head: target mass, argmax agreement (rows inside the grid), MSE against T (all rows), and
    the row figures of `row_figures` (worst row's mass, share of rows peaking on the target)."""
    maps = maps.double()
    inside = targets.inside.double()
    agree = (maps.argmax(-1) == targets.keys).double()
    return {
        "mass": target_mass(maps, targets).tolist(),
        "argmax_agreement": ((agree * inside).sum(-1) / inside.sum(-1).clamp_min(1)).tolist(),
        "mse": (maps - targets.maps.double()).pow(2).mean(dim=(-2, -1)).tolist(),
        **row_figures(maps, targets.keys, targets.inside),
    }


def row_figures(maps: torch.Tensor, keys: torch.Tensor, inside: torch.Tensor) -> dict[str, list[float]]:
    """A convolution is the same map at every query position, so an average can hide positions where
    the head looks elsewhere. Per head, over the query rows whose target is inside the grid, of the
    map averaged over images: `worst_row_mass`, the smallest mass on the target at any row, and
    `rows_on_target`, the share of rows whose largest weight is the target.

    maps (..., H, N, T) (leading dims: images), keys (H, N) target key per row, inside (H, N) bool.
    """
    rows = maps.reshape(-1, *maps.shape[-3:]).mean(0)  # (H, N, T): the map averaged over images
    hit = rows.gather(-1, keys[..., None].to(rows.device))[..., 0]  # (H, N)
    inside = inside.to(rows.device)
    peaked = (rows.argmax(-1) == keys.to(rows.device)) & inside
    worst = torch.where(inside, hit, torch.full_like(hit, float("inf"))).min(-1).values
    worst = torch.where(inside.any(-1), worst, torch.zeros_like(worst))
    share = peaked.sum(-1).double() / inside.sum(-1).clamp_min(1).double()
    return {"worst_row_mass": worst.tolist(), "rows_on_target": share.tolist()}


def smallest_gap(unit_logits: torch.Tensor, targets: Targets, wanted: float, max_gap: float) -> torch.Tensor:
    """Per head, the smallest c in [1, max_gap] with mass(softmax(c * logits)) >= wanted.

    A coarse geometric grid finds the first c that gets there, then bisection (in log c) refines it.
    A head that never gets there aims at 97 % of its best grid mass instead: on real inputs the mass
    peaks and then falls as content takes over sharper logits, and a smaller c keeps the weights small.
    unit_logits (..., H, N, N), e.g. a batch of real inputs (B, H, N, N), -> (H,).
    """
    unit = unit_logits.float()
    heads = unit.shape[-3]

    def mass(gaps: torch.Tensor) -> torch.Tensor:
        maps = torch.softmax(gaps[:, None, None].float() * unit, dim=-1)
        return target_mass(maps, targets).reshape(-1, heads).mean(0)  # (H,)

    grid = torch.logspace(0, math.log10(max_gap), 13, dtype=torch.float64)
    masses = torch.stack([mass(c.expand(heads)) for c in grid]).double()  # (G, H)
    wanted = torch.minimum(torch.full((heads,), wanted, dtype=torch.float64), 0.97 * masses.max(0).values)
    reached = masses >= wanted
    first = reached.double().argmax(0)
    hi, lo = grid[first], grid[(first - 1).clamp_min(0)]
    refine = first > 0
    for _ in range(12):
        mid = (lo * hi).sqrt()
        good = mass(mid) >= wanted
        hi = torch.where(refine & good, mid, hi)
        lo = torch.where(refine & ~good, mid, lo)
    return hi
