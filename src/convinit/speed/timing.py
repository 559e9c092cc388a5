"""Interleaved, repeated timing: every case runs once per round, rounds repeat, the median is reported.

Interleaving spreads slow phases of a shared machine (another process, thermal throttling) over all
cases instead of penalising whichever case happened to run during them, so ratios between cases taken
in one run are fair even when absolute figures wobble.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a timer measures work and not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    cases: dict[str, Callable[[], None]],
    device: torch.device,
    warmup: int = 2,
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, dict[str, float]]:
    """Median, min and max seconds of one call of each case, measured in interleaved rounds; `clock`
    time.process_time counts the process's CPU time, which a machine shared with others disturbs less."""
    for run in cases.values():
        for _ in range(warmup):
            run()
    synchronize(device)
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            synchronize(device)
            start = clock()
            run()
            synchronize(device)
            seconds[name].append(clock() - start)
    return {
        name: {"median": statistics.median(times), "min": min(times), "max": max(times)}
        for name, times in seconds.items()
    }
