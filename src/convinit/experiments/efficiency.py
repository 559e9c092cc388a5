"""Data-efficiency curves: test accuracy against the number of training images, per method.

For each method, fraction and seed: train on a stratified subset of `fraction` of the training set,
then plot final test accuracy against training images and report the area between each method's curve
and the first method's, averaged over log10(images): "how many points better, on average over data
sizes". With `scale_epochs` every run takes as many optimisation steps as the whole set's run
(`scaled_epochs`; ConViT's protocol, docs/method.md §5, scales epochs by 1/fraction, which gives the
same count only when the subsets fill whole batches).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convinit.config import merge, resolve_config, say_once
from convinit.data.datasets import load_dataset
from convinit.data.recipe import DataRecipe
from convinit.data.source import drops_last_batch
from convinit.data.subsets import stratified_subset
from convinit.errors import ConfigError
from convinit.experiments.grid import GridCell, flatten, slug
from convinit.experiments.report import CellResult, find_runs, resolution_note, test_images
from convinit.train.plan import data_recipe

if TYPE_CHECKING:
    import torch

DEFAULT_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def steps_per_epoch(recipe: DataRecipe, n_images: int) -> int:
    """Optimisation steps one epoch of `n_images` takes in one process: the last partial batch kept or
    dropped as training does it (`drops_last_batch`)."""
    if drops_last_batch(recipe, n_images, 1):
        return n_images // recipe.batch_size
    return -(-n_images // recipe.batch_size)


def scaled_epochs(epochs: int, full_steps: int, steps: int) -> int:
    """Epochs of a subset taking `steps` per epoch that give the whole set's `epochs` x `full_steps`
    optimisation steps, to the nearest whole epoch. By steps, not by 1/fraction: 30 of 120 images at
    batch 64 is one step per epoch against two, so 1/fraction (4x) would give the subset twice the steps."""
    return max(1, round(epochs * full_steps / steps))


def fitting_per_class(
    per_class: int | None, by_user: bool, labels: torch.Tensor, classes: list[str], method: str, preset: str
) -> int | None:
    """`per_class` if every class holds that many training images. A preset's that some class cannot hold
    (own_models/*'s 100 per class on a folder of 48) is dropped, with one line, so that the method trains
    on every image instead of failing each run; the user's own is refused in one line before any run."""
    if per_class is None:
        return None
    counts = labels.bincount(minlength=len(classes)).tolist()
    smallest = min(range(len(counts)), key=counts.__getitem__)
    if counts[smallest] >= per_class:
        return per_class
    where = f"class {classes[smallest]!r} has only {counts[smallest]} training images"
    if by_user:
        raise ConfigError(
            f"--method {method}: per_class={per_class} but {where}; lower per_class (at most "
            f"{counts[smallest]}) or drop it to train on every image"
        )
    say_once(
        f"--method {method}: per_class={per_class} of preset {preset!r} is more than the data holds "
        f"({where}): its runs train on all {len(labels):,} training images; set per_class= to choose"
    )
    return None


def efficiency_runs(
    methods: dict[str, tuple[str, dict[str, Any]]],
    fractions: tuple[float, ...] | list[float] = DEFAULT_FRACTIONS,
    seeds: tuple[int, ...] | list[int] = (0,),
    scale_epochs: bool = False,
    overrides: dict[str, Any] | None = None,
) -> list[GridCell]:
    """methods: {label: (preset, overrides)}; one GridCell per method x fraction x seed.

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
        recipe = data_recipe(base)
        data = load_dataset(base.dataset, base.data_dir, base.download, **recipe.options)
        labels, given = data.train_labels, {**method_overrides, **overrides}
        per_class = fitting_per_class(
            base.per_class, "per_class" in given, labels, data.classes, label, preset
        )
        full = len(stratified_subset(labels, None, per_class, 0, base.subset_order))
        full_steps = steps_per_epoch(recipe, full)
        for fraction in fractions:
            if not 0 < fraction <= 1:
                raise ConfigError(f"fractions must be in (0, 1], got {fraction}")
            n_images = (
                full
                if fraction == 1
                else len(stratified_subset(labels, fraction, None, 0, base.subset_order))
            )
            steps = steps_per_epoch(recipe, n_images)
            epochs = scaled_epochs(base.epochs, full_steps, steps) if scale_epochs else base.epochs
            changes = {"train_fraction": None if fraction == 1 else fraction, "epochs": epochs}
            if per_class != base.per_class:  # the preset's subset, more than the data holds: every image
                changes["per_class"] = per_class
            for seed in seeds:
                cfg = resolve_config(
                    preset, merge(merge(method_overrides, overrides), {**changes, "seed": seed})
                )
                extra = {
                    "group": label,
                    "fraction": fraction,
                    "train_images": n_images,
                    "steps": epochs * steps,
                }
                # the method's index orders the report; the first method is the reference curve
                runs.append(
                    GridCell(
                        "efficiency", f"{label} @ {fraction:g}", seed, cfg, preset, None, extra, method_index
                    )
                )
    return runs


def efficiency_dirname(spec: GridCell) -> str:
    return f"{slug(spec.extra['group'])}/f{spec.extra['fraction']:g}/seed{spec.seed}"


def accuracies(root: Path) -> dict[str, dict[int, list[float]]]:
    """{method: {training images: [final accuracy of each seed]}} from the finished runs under `root`."""
    return accuracies_of(find_runs(root))


def efficiency_records(records: list[CellResult]) -> list[CellResult]:
    """The finished runs that an efficiency grid made (they record their training images)."""
    return [r for r in records if "train_images" in r.experiment and r.final_accuracy is not None]


def accuracies_of(records: list[CellResult]) -> dict[str, dict[int, list[float]]]:
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in efficiency_records(records):
        group = record.experiment.get("group", record.label)  # a hand-made record may lack it
        points[group][int(record.experiment["train_images"])].append(record.final_accuracy)
    return points


def curves(root: Path) -> dict[str, list[tuple[int, float]]]:
    """{method: [(training images, mean final accuracy)]} from the finished runs under `root`."""
    return mean_curves(accuracies(root))


def mean_curves(points: dict[str, dict[int, list[float]]]) -> dict[str, list[tuple[int, float]]]:
    return {m: sorted((n, statistics.fmean(a)) for n, a in by_n.items()) for m, by_n in points.items()}


def schedule_note(records: list[CellResult]) -> str:
    """Epochs and optimisation steps of each column (training images), and whether the columns differ in
    them: a curve across columns of different schedules compares more than the data size."""
    epochs: dict[int, set[int]] = defaultdict(set)
    steps: dict[int, set[int]] = defaultdict(set)
    for record in efficiency_records(records):
        size, last = int(record.experiment["train_images"]), record.metrics[-1]
        epochs[size].add(int(last["epoch"]))
        if isinstance(last.get("step"), int):  # the run's optimisation steps, as it counted them
            steps[size].add(last["step"])

    def shown(values: set[int]) -> str:
        return "/".join(map(str, sorted(values))) or "?"

    columns = "; ".join(
        f"{n} imgs: {shown(epochs[n])} epochs, {shown(steps[n])} steps" for n in sorted(epochs)
    )
    line = f"Schedules per column: {columns}."
    if len({shown(e) for e in epochs.values()}) > 1:
        line += " The columns ran different numbers of epochs"
        line += (
            ", chosen so that every run takes as many optimisation steps (--scale-epochs)."
            if len({shown(s) for s in steps.values()}) == 1
            else "."
        )
    elif len({shown(s) for s in steps.values()}) > 1:
        line += (
            " Every column ran the same epochs, so a larger set took more optimisation steps: the curve "
            "mixes data size with training length (--scale-epochs gives every run as many steps)."
        )
    return line


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
    records = find_runs(root)
    seeds = accuracies_of(records)
    data = mean_curves(seeds)
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
        "",
        schedule_note(records),
    ]
    cells = [statistics.fmean(accs) for by_n in seeds.values() for accs in by_n.values()]
    note = resolution_note(test_images(efficiency_records(records)), cells)
    if note:
        lines += ["", note]
    return "\n".join(lines)
