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


@dataclass(frozen=True)
class GapShare:
    """How much of the gap between a reference and a ceiling row a row closes, on the seeds all three share:
    mean(row - reference) / mean(ceiling - reference) (0: no gain, 1: up to the ceiling)."""

    seeds: tuple[int, ...]
    gains: tuple[float, ...]
    gaps: tuple[float, ...]

    @property
    def mean(self) -> float | None:
        """None where the ceiling is not above the reference: there is no gap to close."""
        gap = statistics.fmean(self.gaps)
        return statistics.fmean(self.gains) / gap if gap > 0 else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The paired difference's 95 % interval in units of the mean gap, so that the share and the
        difference say the same about 0 side by side (the gap's own spread over seeds is not in it)."""
        share, gap = self.mean, statistics.fmean(self.gaps)
        gains = PairedDifference(self.seeds, self.gains).interval
        if share is None or gains is None:
            return None
        return gains[0] / gap, gains[1] / gap

    def describe(self) -> str:
        """'0.52 [0.31, 0.73]', '0.52 (1 seed, no interval)' or 'no gap (the ceiling is not above it)'."""
        share, interval = self.mean, self.interval
        if share is None:
            return "no gap (the ceiling is not above the reference)"
        if interval is None:
            return f"{share:.2f} ({len(self.gains)} seed, no interval)"
        return f"{share:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def gap_share(
    row: dict[int, float], reference: dict[int, float], ceiling: dict[int, float]
) -> GapShare | None:
    """{seed: accuracy} of a row, its reference and a ceiling; None when the three share no seed."""
    seeds = tuple(sorted(set(row) & set(reference) & set(ceiling)))
    if not seeds:
        return None
    return GapShare(
        seeds, tuple(row[s] - reference[s] for s in seeds), tuple(ceiling[s] - reference[s] for s in seeds)
    )
