"""Analysis of models and runs: per-epoch trackers, attention maps and plots.

Trackers are functions `tracker(model, images) -> dict[str, float]` that the trainer calls at the end
of each epoch on a fixed evaluation batch when the run's config lists them in `track`; their values
go into the run's metrics. Each is one module of `convinit.analysis.trackers` that registers it with
`register_tracker`; the registry imports them all the first time it is asked for a name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from convinit.naming.registry import Registry

Tracker = Callable[[nn.Module, torch.Tensor], dict[str, float]]


def unknown_tracker(typed: str, names: list[str]) -> str:
    """The refusal of a tracker name: every tracker, since there are few."""
    return f"unknown tracker {typed!r}; choose from: {', '.join(names) or 'none'}"


TRACKERS: Registry[Tracker] = Registry("tracker", "convinit.analysis.trackers", unknown=unknown_tracker)


def register_tracker(name: str) -> Callable[[Tracker], Tracker]:
    """Decorator: register `fn(model, images) -> {metric: value}` as tracker `name`."""
    return TRACKERS.register(name)


def list_trackers() -> list[str]:
    return TRACKERS.names()


def get_tracker(name: str) -> Tracker:
    return TRACKERS.get(name)
