"""Paired per-seed differences between two rows of a report, with a 95 % t interval (docs/method.md §6).

Seeds fix a run's initial weights and data order, so the same seed in two rows is a matched pair: the
difference of their final accuracies removes what the seed alone explains. Over n shared seeds,
mean d +- t(0.975, n - 1) * sd(d) / sqrt(n) is the 95 % interval of the mean difference; one that
contains 0 is within noise at this number of seeds. With one shared seed there is no interval.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class PairedDifference:
    """Row minus reference over the seeds both have: per-seed differences, their mean and interval."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.differences)

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95 % t interval of the mean difference, or None with fewer than two pairs."""
        n = len(self.differences)
        if n < 2:
            return None
        from scipy.stats import t

        half = float(t.ppf(0.975, n - 1)) * statistics.stdev(self.differences) / math.sqrt(n)
        return self.mean - half, self.mean + half

    @property
    def within_noise(self) -> bool | None:
        interval = self.interval
        return None if interval is None else interval[0] <= 0.0 <= interval[1]

    def describe(self) -> str:
        """'+2.71 [+1.02, +4.40]', '-0.03 [-3.1, +3.0] within noise', or '+1.20 (1 seed, no interval)'."""
        interval = self.interval
        if interval is None:
            return f"{self.mean:+.2f} ({len(self.differences)} seed, no interval)"
        text = f"{self.mean:+.2f} [{interval[0]:+.2f}, {interval[1]:+.2f}]"
        return text + (" within noise" if self.within_noise else "")


def paired_difference(row: dict[int, float], reference: dict[int, float]) -> PairedDifference | None:
    """{seed: accuracy} of a row against the reference row's; None when they share no seed."""
    seeds = tuple(sorted(set(row) & set(reference)))
    if not seeds:
        return None
    return PairedDifference(seeds, tuple(row[s] - reference[s] for s in seeds))
