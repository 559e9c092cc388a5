"""Accuracy against the number of training images: the claims of one curve, as a table and a figure.

A user with few images asks below what size a ViT with convinit's bias beats a CNN of its size. The
results page answers it claim by claim, one training-set size per claim; claims that share a `curve`
name (results/claims.yaml) pair the same two rows at several sizes, and here they become one curve:
both rows' final accuracy with the 95 % t interval of its mean over seeds, against the number of
training images on a log axis, and beside it the paired difference with its interval and the zero line.
Where that interval changes side is the size the page can state; where it never does, the figure shows
it. The points are written into the PNG's metadata, so a test holds the kept figure to the kept runs
(the pixels depend on the matplotlib that drew them; the numbers must not).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from convinit.experiments.paired import PairedDifference
from convinit.system.atomic import atomic_writer

FIGURE_KEY = "convinit-points"  # the PNG text chunk holding the points the figure draws


@dataclass(frozen=True)
class SizePoint:
    """One training-set size of a curve: both rows' per-seed accuracies and their paired difference."""

    images: int
    row: str
    reference: str
    row_values: dict[int, float]
    reference_values: dict[int, float]
    difference: PairedDifference | None

    def as_dict(self) -> dict[str, object]:
        """The figures the plot draws, rounded as the page shows them (the PNG's metadata)."""
        interval = self.difference.interval if self.difference else None
        return {
            "images": self.images,
            self.row: mean_interval(self.row_values),
            self.reference: mean_interval(self.reference_values),
            "difference": None
            if interval is None or self.difference is None
            else [round(self.difference.mean, 2), round(interval[0], 2), round(interval[1], 2)],
        }


def mean_interval(values: dict[int, float]) -> list[float] | None:
    """[mean, low, high]: the mean over seeds and its 95 % t interval, two decimals; None under 2 seeds."""
    if len(values) < 2:
        return None
    from scipy.stats import t

    numbers = list(values.values())
    mean = statistics.fmean(numbers)
    half = float(t.ppf(0.975, len(numbers) - 1)) * statistics.stdev(numbers) / math.sqrt(len(numbers))
    return [round(mean, 2), round(mean - half, 2), round(mean + half, 2)]


def figure_name(curve: str) -> str:
    """'images/vit-vs-cnn-by-training-images.png' (relative to the page) for a curve's name."""
    return "images/" + re.sub(r"[^a-z0-9]+", "-", curve.lower()).strip("-") + ".png"


def figure_data(points: list[SizePoint]) -> str:
    return json.dumps([point.as_dict() for point in points], sort_keys=True)


def curve_table(points: list[SizePoint]) -> list[str]:
    """Markdown rows: per size, both rows' mean [95 % interval] and the paired difference."""
    row, reference = points[0].row, points[0].reference
    lines = [
        f"| training images | {row} | {reference} | paired difference [95 % interval] | seeds |",
        "| ---: | --- | --- | --- | ---: |",
    ]
    for point in sorted(points, key=lambda p: p.images):
        seeds = len(point.difference.seeds) if point.difference else 0
        difference = point.difference.describe() if point.difference else "-"
        row_text, reference_text = interval_text(point.row_values), interval_text(point.reference_values)
        lines.append(f"| {point.images:,} | {row_text} | {reference_text} | {difference} | {seeds} |")
    return lines


def interval_text(values: dict[int, float]) -> str:
    found = mean_interval(values)
    return "-" if found is None else f"{found[0]:.2f} [{found[1]:.2f}, {found[2]:.2f}]"


def plot_size_curve(curve: str, points: list[SizePoint], path: Path) -> Path:
    """Both rows against the number of training images (left) and their paired difference (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = sorted((p for p in points if p.difference is not None), key=lambda p: p.images)
    sizes = [p.images for p in shown]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for label, pick, marker in (
        (shown[0].row, "row_values", "o"),
        (shown[0].reference, "reference_values", "s"),
    ):
        found = [mean_interval(getattr(p, pick)) or [math.nan] * 3 for p in shown]
        means = [f[0] for f in found]
        bars = [[f[0] - f[1] for f in found], [f[2] - f[0] for f in found]]
        left.errorbar(sizes, means, yerr=bars, marker=marker, capsize=4, label=label)
    right.axhline(0.0, color="grey", linewidth=1)
    differences = [p.difference for p in shown if p.difference is not None]
    lows = [d.mean - (d.interval or (d.mean, d.mean))[0] for d in differences]
    highs = [(d.interval or (d.mean, d.mean))[1] - d.mean for d in differences]
    right.errorbar(
        sizes, [d.mean for d in differences], yerr=[lows, highs], marker="o", capsize=4, color="C2"
    )
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{size:,}" for size in sizes])
        ax.minorticks_off()
        ax.set_xlim(sizes[0] / 1.4, sizes[-1] * 1.4)
        ax.set_xlabel("training images")
        ax.grid(alpha=0.3)
    left.set_ylabel("final test accuracy (%)")
    left.set_title("mean over seeds, 95 % t interval", fontsize=10)
    left.legend(fontsize=8)
    right.set_ylabel("paired difference (points)")
    right.set_title(
        f"{shown[0].row}\nminus {shown[0].reference}, paired by seed, 95 % t interval", fontsize=9
    )
    fig.suptitle(curve, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110, metadata={FIGURE_KEY: figure_data(points)})
    plt.close(fig)
    return path


def kept_figure_data(path: Path) -> str | None:
    """The points a kept figure was drawn from (its metadata), or None where it is missing or unreadable."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return getattr(image, "text", {}).get(FIGURE_KEY)
    except (OSError, UnidentifiedImageError):
        return None
