"""Analysis of models and runs: per-epoch trackers, attention maps and plots.

Trackers are functions `tracker(model, images) -> dict[str, float]` that the trainer calls at the end
of each epoch on a fixed evaluation batch when the run's config lists them in `track`; their values
go into the run's metrics. Modules in this package register them with `register_tracker`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from convinit.errors import ConfigError

Tracker = Callable[[nn.Module, torch.Tensor], dict[str, float]]
_TRACKERS: dict[str, Tracker] = {}


def register_tracker(name: str) -> Callable[[Tracker], Tracker]:
    def decorate(fn: Tracker) -> Tracker:
        _TRACKERS[name] = fn
        return fn

    return decorate


def list_trackers() -> list[str]:
    return sorted(_TRACKERS)


def get_tracker(name: str) -> Tracker:
    if name not in _TRACKERS:
        raise ConfigError(f"unknown tracker {name!r}; choose from: {', '.join(list_trackers()) or 'none'}")
    return _TRACKERS[name]


from convinit.analysis import gates, init_quality, locality  # noqa: E402,F401  (register the trackers)
