"""Data-efficiency curves: test accuracy against the number of training images, per method.

For each method, fraction and seed: train on a stratified subset of `fraction` of the training set
(optionally with epochs scaled by 1/fraction, ConViT's protocol, docs/method.md §5), then plot final
test accuracy against training images and report the area between each method's curve and the
first method's, averaged over log10(images): "how many points better, on average over data sizes".
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from convinit.config import merge, resolve_config
from convinit.data.datasets import load_dataset
from convinit.data.subsets import stratified_subset
from convinit.errors import ConfigError
from convinit.experiments.grid import RunSpec, flatten, slug
from convinit.experiments.report import find_runs
from convinit.train.plan import data_recipe

DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def efficiency_runs(
    methods: dict[str, tuple[str, dict[str, Any]]],
    fractions: tuple[float, ...] | list[float] = DEFAULT_FRACTIONS,
    seeds: tuple[int, ...] | list[int] = (0,),
    scale_epochs: bool = False,
    overrides: dict[str, Any] | None = None,
) -> list[RunSpec]:
    """methods: {label: (preset, overrides)}; one RunSpec per method x fraction x seed.

    Overrides may use dotted keys (`model_args.dim`) or nested mappings.
    """
    runs = []
    overrides = flatten(overrides or {})
    for method_index, (label, (preset, method_overrides)) in enumerate(methods.items()):
        method_overrides = flatten(method_overrides)
        try:
            base = resolve_config(preset, merge(method_overrides, overrides))
        except ConfigError as exc:  # name the method: several may share a preset
            raise ConfigError(f"--method {label}: {exc}") from exc
        labels = load_dataset(
            base.dataset, base.data_dir, base.download, **data_recipe(base).options
        ).train_labels
        for fraction in fractions:
            if not 0 < fraction <= 1:
                raise ConfigError(f"fractions must be in (0, 1], got {fraction}")
            n_images = len(stratified_subset(labels, fraction, None, 0, base.subset_order))
            epochs = max(1, round(base.epochs / fraction)) if scale_epochs else base.epochs
            changes = {"train_fraction": None if fraction == 1 else fraction, "epochs": epochs}
            for seed in seeds:
                cfg = resolve_config(
                    preset, merge(merge(method_overrides, overrides), {**changes, "seed": seed})
                )
                runs.append(
                    RunSpec(
                        "efficiency",
                        f"{label} @ {fraction:g}",
                        seed,
                        cfg,
                        preset,
                        None,
                        {"group": label, "fraction": fraction, "train_images": n_images},
                        method_index,  # orders the report; the first method is the reference curve
                    )
                )
    return runs


def efficiency_dirname(spec: RunSpec) -> str:
    return f"{slug(spec.extra['group'])}/f{spec.extra['fraction']:g}/seed{spec.seed}"


def accuracies(root: Path) -> dict[str, dict[int, list[float]]]:
    """{method: {training images: [final accuracy of each seed]}} from the finished runs under `root`."""
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in find_runs(root):
        if "train_images" in record.experiment and record.final_accuracy is not None:
            group = record.experiment.get("group", record.label)  # a hand-made record may lack it
            points[group][int(record.experiment["train_images"])].append(record.final_accuracy)
    return points


def curves(root: Path) -> dict[str, list[tuple[int, float]]]:
    """{method: [(training images, mean final accuracy)]} from the finished runs under `root`."""
    points = accuracies(root)
    return {m: sorted((n, statistics.fmean(a)) for n, a in by_n.items()) for m, by_n in points.items()}


def mean_std(values: list[float]) -> str:
    """'71.3 +- 2.1' over seeds; the mean alone for one seed (no spread to give)."""
    mean = f"{statistics.fmean(values):.1f}"
    return f"{mean} +- {statistics.stdev(values):.1f}" if len(values) > 1 else mean


def area_between(curve: list[tuple[int, float]], reference: list[tuple[int, float]]) -> float:
    """Mean accuracy difference (points) over the shared range of log10(images), trapezoid rule."""
    ref = dict(reference)
    shared = [(math.log10(n), acc - ref[n]) for n, acc in curve if n in ref]
    if len(shared) < 2:
        return shared[0][1] if shared else float("nan")
    area = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(shared, shared[1:], strict=False))
    return area / (shared[-1][0] - shared[0][0])


def efficiency_summary(root: Path) -> str:
    """Markdown: final accuracy per method and data size (mean +- std over seeds), and each method's area
    against the first; a line under the table says how many seeds each cell holds."""
    data, seeds = curves(root), accuracies(root)
    if not data:
        raise ConfigError(f"{root} holds no finished efficiency runs")
    methods = list(data)
    sizes = sorted({n for c in data.values() for n, _ in c})
    lines = [
        "| method | " + " | ".join(f"{n} imgs" for n in sizes) + f" | mean gain vs {methods[0]} (points) |",
        "| --- | " + " | ".join("---:" for _ in sizes) + " | ---: |",
    ]
    for method in methods:
        cells = [mean_std(seeds[method][n]) if n in seeds[method] else "-" for n in sizes]
        gain = area_between(data[method], data[methods[0]])
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {gain:+.2f} |")
    counts = sorted({len(a) for by_n in seeds.values() for a in by_n.values()})
    over = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
    lines += [
        "",
        f"Final-epoch test accuracy (%), mean +- std over the {over} seed(s) of each cell; gain: the mean "
        f"difference from {methods[0]} over log10(training images).",
    ]
    return "\n".join(lines)
