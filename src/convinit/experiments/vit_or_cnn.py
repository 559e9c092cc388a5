"""ViT or CNN for my images? The recommended ViT against the CNN of its size on one's data, and a verdict.

The comparison is the results page's `vit-vs-cnn` grid (docs/own-models.md, "ViT against CNN on small data")
made for any dataset: the ViT (the user's `model=timm:NAME` / `hf:vit` with the recommended recipe, or
convinit's recommended small ViT: timm's ViT at width 64, depth 4 with paper 1's blend, content projection
and impulse init, docs/method.md §3, §8, §9) against the ConvMixer of about its size
(own_models/convmixer_small), on the same token grid, with the same augmentation (random crops; flips only
where a mirror keeps the class), the same optimiser, epochs and seeds. Epochs come from a step budget (the
grid's 300 epochs of 16 steps, where its ViT fitted its training images): small sets take more epochs of
fewer steps. When a row ends still learning (it fits under FITTED % of its training images, unaugmented,
and its training loss still fell over the run's last tenth) both rows train again at twice the epochs.

The verdict accounts for both noises: the paired difference over seeds (docs/method.md §6) and the test
set's own binomial uncertainty, which seeds cannot average away since every seed is scored on the same
images. The grid runner does the training (resumable: a rerun continues), the report its table.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convinit.config import merge, parse_overrides, resolve_config, say_once
from convinit.config.recommendation import RECOMMENDED, as_overrides
from convinit.data.datasets import dataset_info, load_dataset
from convinit.data.subsets import stratified_subset
from convinit.errors import ConfigError
from convinit.experiments.efficiency import efficiency_runs, steps_per_epoch
from convinit.experiments.grid import GridCell
from convinit.experiments.paired import PairedDifference, paired_difference
from convinit.experiments.report import CellResult, find_failed, find_runs, test_images, write_report
from convinit.experiments.results_page import (
    EQUIVALENCE_MARGIN,
    late_loss_change,
    mean_std,
    results_paths,
    seed_values,
)
from convinit.experiments.runner import failed, run_grid
from convinit.system.atomic import atomic_write_text
from convinit.train.plan import data_recipe

VIT, CNN = "ViT", "CNN"  # the two rows (folders vit/ and cnn/)
VIT_PRESET, CNN_PRESET = "own_models/timm_vit_small", "own_models/convmixer_small"
# vit-vs-cnn: 300 epochs of 16 steps (1,000 images, batch 64), where the ViT fitted 92 % of its training
# images and the CNN all of them; --quick takes an eighth
STEP_BUDGET, QUICK_STEPS = 4800, 600
MIN_EPOCHS, MAX_EPOCHS = 3, 1000  # a large set still sees each image a few times; a tiny one is doubled later
MORE_SEEDS_UP_TO = 5000  # training images up to which runs are cheap enough for 5 seeds (3 beyond)
FITTED = 95.0  # % of its own training images (unaugmented) above which a run has fitted them
STILL_FALLING = -0.02  # the training loss's change over the last tenth, relative to it, below which it fell
DOUBLINGS = 2  # at most 4x the planned epochs
MODEL_KEYS = ("model", "model_args", "convert", "convert_args", "init", "init_args", "recommended")
KEPT_GRIDS = {100: "vit-vs-cnn-100", 300: "vit-vs-cnn-300", 1000: "vit-vs-cnn"}  # the page's sizes of it
KEPT_VIT, KEPT_CNN = "blend conversion + impulse + content projection", "ConvMixer (CNN)"
Z95 = 1.959964  # two-sided 95 % normal quantile


@dataclass(frozen=True)
class ComparisonPlan:
    """Both rows' presets and overrides, what they share, and the data's size; `notes` say what was chosen."""

    methods: dict[str, tuple[str, dict[str, Any]]]
    shared: dict[str, Any]
    seeds: tuple[int, ...]
    epochs: int
    epochs_fixed: bool  # --epochs given: trained as asked, never extended
    train_images: int
    test_images: int
    classes: int
    vit_name: str
    notes: tuple[str, ...] = ()


def grid_patch(height: int, width: int) -> int:
    """The patch size giving the token grid nearest 7x7 (the grid of the results page's comparison), from
    the divisors of both sides so no pixel is cut off; a grid of at least 5 keeps the 5x5 kernels useful."""
    side = math.gcd(height, width)
    divisors = [p for p in range(1, side + 1) if side % p == 0 and min(height, width) // p >= 5]
    if not divisors:
        return 1
    return min(divisors, key=lambda p: (abs(min(height, width) // p - 7), p))


def split_keys(user: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The user's keys as (the ViT's own: model, its args, its method; the others, which both rows share)."""
    own = {k: v for k, v in user.items() if k in MODEL_KEYS}
    return own, {k: v for k, v in user.items() if k not in MODEL_KEYS}


def vit_method(own: dict[str, Any], notes: list[str]) -> tuple[str, dict[str, Any], str]:
    """(preset, overrides, words) of the ViT row: the user's timm / transformers ViT (the recommended recipe
    applies to it unless they chose a method), else convinit's recommended small ViT."""
    model = own.get("model")
    if model is not None:
        if not (isinstance(model, str) and model.startswith(("timm:", "hf:"))):
            raise ConfigError(
                f"model={model} is not a ViT of yours: give model=timm:NAME or model=hf:vit (the ViT to set "
                "against the CNN), or leave model= out for convinit's recommended ViT"
            )
        return "own_models/recipe", own, model
    if importlib.util.find_spec("timm") is None:
        notes.append(
            "timm is not installed: the ViT is convinit's own (preset own_data: the blend ViT with impulse "
            'init); `pip install "convinit[timm]"` for the timm ViT the results page compares'
        )
        return "own_data", own, "convinit's blend ViT with impulse init (own_data)"
    recipe = parse_overrides(as_overrides(RECOMMENDED))
    return VIT_PRESET, merge(recipe, own), "timm's ViT (width 64, depth 4) with the recommended recipe"


def augmentation(shared: dict[str, Any], dataset: str, side: int, notes: list[str]) -> dict[str, Any]:
    """Random crops (the image padded by a seventh of its side, 4 px on 28 px as the results page's grid)
    and horizontal flips only where a mirror keeps the class; what the user set stays."""
    chosen: dict[str, Any] = {}
    if "crop_padding" not in shared:
        chosen["crop_padding"] = max(1, side // 7)
    if "hflip" not in shared:
        keeps = dataset_info(dataset).mirror_keeps_class
        chosen["hflip"] = bool(keeps)
        if keeps is False:
            notes.append(f"flips off: a mirror changes the class of an image in {dataset}")
        if keeps is None:
            notes.append(
                f"flips off: whether a mirrored image keeps its class is unknown for dataset={dataset} "
                "(a mirrored 2 is no digit); add hflip=true if it does"
            )
    crop = shared.get("crop_padding", chosen.get("crop_padding"))
    flips = shared.get("hflip", chosen.get("hflip"))
    notes.append(
        f"augmentation for both: random crops (padding {crop} px){', horizontal flips' * bool(flips)}"
    )
    return chosen


def budget(steps: int, n_train: int, quick: bool, seeds: list[int] | None, epochs: int | None):
    """(seeds, epochs): a step budget spread over the epochs of this set, more seeds where runs are cheap."""
    if epochs is None:
        epochs = min(MAX_EPOCHS, max(MIN_EPOCHS, -(-(QUICK_STEPS if quick else STEP_BUDGET) // steps)))
    if seeds is None:
        seeds = list(range(3 if quick or n_train > MORE_SEEDS_UP_TO else 5))
    return tuple(seeds), epochs


def plan_comparison(
    overrides: list[str] | dict[str, Any] | None = None,
    seeds: list[int] | None = None,
    epochs: int | None = None,
    quick: bool = False,
) -> ComparisonPlan:
    """Both rows for the data `overrides` name (dataset=folder data_dir=DIR, any dataset; the embedded digits
    without one), every choice made from the data read once, before any run; `notes` say each choice."""
    user = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    notes: list[str] = []
    if "epochs" in user:  # epochs=N means --epochs N: trained as asked
        given = user.pop("epochs")
        epochs = given if epochs is None else epochs
    if epochs is not None and not (isinstance(epochs, int) and epochs >= 1):
        raise ConfigError(f"--epochs {epochs} trains nothing; give 1 or more (default: chosen from the data)")
    own, shared = split_keys(user)
    if "dataset" not in shared:
        shared["dataset"] = "digits"
        notes.append(
            "no dataset= given: the embedded digits set (dataset=folder data_dir=DIR for your images)"
        )
    if not {"per_class", "train_fraction"} & set(shared):
        shared["per_class"] = None  # all the training images (the presets' 100 per class are their own set's)
    preset, vit_overrides, words = vit_method(own, notes)
    base = resolve_config(preset, merge(vit_overrides, shared))
    recipe = data_recipe(base)
    data = load_dataset(base.dataset, base.data_dir, base.download, **recipe.options)
    height, width = (base.img_size, base.img_size) if base.img_size else data.img_size
    n_train = len(
        stratified_subset(data.train_labels, base.train_fraction, base.per_class, 0, base.subset_order)
    )
    patch = (own.get("model_args") or {}).get("patch_size") or grid_patch(height, width)
    shared = {**shared, **augmentation(shared, base.dataset, min(height, width), notes)}
    seeds, epochs_planned = budget(steps_per_epoch(recipe, n_train), n_train, quick, seeds, epochs)
    grid = f"{height // patch}x{width // patch}"
    notes += [
        f"the ViT: {words}; the CNN: a ConvMixer of about its size (width 128, depth 8), both on the same "
        f"{grid} grid of {patch} px patches",
        f"{n_train:,} training / {len(data.test_labels):,} test images, {data.num_classes} classes: "
        f"{counted(len(seeds), 'seed')}, {counted(epochs_planned, 'epoch')} "
        f"({counted(epochs_planned * steps_per_epoch(recipe, n_train), 'step')}) for both"
        + ("" if epochs is not None or quick else ", twice as many where a row still learns"),
    ]
    methods = {
        VIT: (preset, merge(vit_overrides, {"model_args": {"patch_size": patch}})),
        CNN: (CNN_PRESET, {"model_args": {"patch_size": patch}, "channels_last": True}),
    }
    return ComparisonPlan(
        methods, shared, seeds, epochs_planned, epochs is not None, n_train, len(data.test_labels),
        data.num_classes, words, tuple(notes),
    )  # fmt: skip


def comparison_runs(plan: ComparisonPlan, epochs: int) -> list[GridCell]:
    """Both rows x the plan's seeds at `epochs`, as the grid runner takes them (folders vit/ and cnn/)."""
    runs = efficiency_runs(plan.methods, (1.0,), plan.seeds, False, {**plan.shared, "epochs": epochs})
    for spec in runs:
        spec.label = spec.extra["group"]
    return runs


def counted(n: int, noun: str) -> str:
    """'1 seed', '5 seeds', '1,000 epochs'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def row_mean(records: list[CellResult], label: str, metric: str) -> float | None:
    values = seed_values(records, label, metric)
    return statistics.fmean(values.values()) if values else None


def loss_fall(record: CellResult, _: str) -> float | None:
    """The training loss's change over the run's last tenth, relative to the final loss (-0.05: fell 5 %)."""
    change, loss = late_loss_change(record, ""), record.metrics[-1].get("train_loss")
    return change / loss if change is not None and isinstance(loss, int | float) and loss > 0 else None


def still_learning(records: list[CellResult]) -> list[str]:
    """The rows that had neither fitted their training images nor plateaued: their mean fit under FITTED %
    and their training loss still falling (by more than STILL_FALLING of itself) over the last tenth."""
    learning = []
    for label in (VIT, CNN):
        fit = row_mean(records, label, "fit_acc")
        falls = [loss_fall(r, "") for r in records if r.label == label]
        falls = [f for f in falls if f is not None]
        if (fit is None or fit < FITTED) and falls and statistics.fmean(falls) < STILL_FALLING:
            learning.append(label)
    return learning


def train_comparison(plan: ComparisonPlan, out: Path, jobs: int, progress: bool, quick: bool):
    """Run the plan's grid at its epochs, then at twice them while a row still learns (at most DOUBLINGS
    times; never with --epochs or --quick). Returns (the last grid's folder, its records, its outcome,
    the rows still learning there)."""
    epochs, doublings = plan.epochs, 0
    while True:
        folder = out / f"epochs{epochs}"
        outcome = run_grid(comparison_runs(plan, epochs), folder, "local", jobs, progress)
        records = find_runs(folder, skipped=[])
        for label, seed, reason in find_failed(folder):  # why, on the terminal: not only in failed.json
            print(f"failed: the {label}, seed {seed}: {reason.splitlines()[0]}")
        learning = still_learning(records)
        if not learning or plan.epochs_fixed or quick or doublings == DOUBLINGS or failed(outcome):
            return folder, records, outcome, learning
        print(
            f"convinit: {' and '.join(learning)} still learning after {epochs} epochs (fit under "
            f"{FITTED:g} % of its training images, loss still falling): both rows train again at "
            f"{2 * epochs} epochs"
        )
        epochs, doublings = 2 * epochs, doublings + 1


@dataclass(frozen=True)
class Verdict:
    """ViT minus CNN: the paired difference over seeds, widened by the test set's own uncertainty."""

    answer: str  # "the ViT", "the CNN", "about as good" or "cannot tell"
    difference: PairedDifference  # final test accuracy, ViT minus CNN, per shared seed
    vit: float  # mean final test accuracy (%)
    cnn: float
    test_images: int
    seed_half: float | None  # the paired 95 % t interval's half-width (None with one seed)
    test_half: float  # 95 % half-width of a difference of two accuracies on `test_images` images

    @property
    def half(self) -> float:
        """Both noises together (independent: their variances add)."""
        return math.hypot(self.seed_half or 0.0, self.test_half)

    @property
    def interval(self) -> tuple[float, float]:
        return self.difference.mean - self.half, self.difference.mean + self.half


def binomial_half(vit: float, cnn: float, n: int) -> float:
    """95 % half-width (points) of a difference of two accuracies (%) measured on the same `n` images, from
    their binomial variances. Conservative: two models scored on the same images err together on some of
    them, which the paired (McNemar) variance would take off, but that needs each image's predictions."""
    p, q = vit / 100, cnn / 100
    return 100 * Z95 * math.sqrt((p * (1 - p) + q * (1 - q)) / n)


def judge(records: list[CellResult], n_test: int) -> Verdict:
    """The verdict from the grid's finished runs: the seeds both rows finished, and `n_test` test images."""
    vit, cnn = seed_values(records, VIT, "final_acc"), seed_values(records, CNN, "final_acc")
    difference = paired_difference(vit, cnn)
    if difference is None:
        raise ConfigError("no seed finished for both the ViT and the CNN; see the failed runs above")
    vit_mean = statistics.fmean(vit[s] for s in difference.seeds)
    cnn_mean = statistics.fmean(cnn[s] for s in difference.seeds)
    seeds = difference.interval
    seed_half = None if seeds is None else (seeds[1] - seeds[0]) / 2
    verdict = Verdict(
        "", difference, vit_mean, cnn_mean, n_test, seed_half, binomial_half(vit_mean, cnn_mean, n_test)
    )
    low, high = verdict.interval
    if seed_half is None:
        answer = "cannot tell"
    elif low > 0 or high < 0:
        answer = "the ViT" if low > 0 else "the CNN"
    elif -EQUIVALENCE_MARGIN <= low and high <= EQUIVALENCE_MARGIN:
        answer = "about as good"
    else:
        answer = "cannot tell"
    return dataclasses.replace(verdict, answer=answer)


def answer_line(verdict: Verdict) -> str:
    """The verdict's first line: which to choose and how sure, in the words a user asked the question in."""
    low, high = verdict.interval
    gap = f"{verdict.difference.mean:+.2f} points [{low:+.2f}, {high:+.2f}]"
    seeds = len(verdict.difference.seeds)
    if verdict.answer in ("the ViT", "the CNN"):
        together = "95 %, seeds and test set together"
        return f"Verdict: {verdict.answer} is better here: ViT minus CNN {gap} ({together})."
    if verdict.answer == "about as good":
        return f"Verdict: about as good: ViT minus CNN {gap}, within +-{EQUIVALENCE_MARGIN:g} points."
    why = "one seed gives no seed noise" if verdict.seed_half is None else f"{seeds} seeds"
    return (
        f"Verdict: cannot tell on {verdict.test_images:,} test images and {why}: ViT minus CNN {gap}, an "
        "interval that holds 0 and is wider than +-2 points."
    )


def noise_line(verdict: Verdict) -> str:
    """Which noise dominates, and what would narrow the interval."""
    test = (
        f"the test set +-{verdict.test_half:.2f} (two accuracies on {verdict.test_images:,} images, "
        "binomial; conservative, as both are scored on the same images)"
    )
    if verdict.seed_half is None:
        return f"Noise: {test}; seed noise unmeasured: run --seeds 3 or more."
    seeds = (
        f"seeds +-{verdict.seed_half:.2f} (paired 95 % t interval over {len(verdict.difference.seeds)} seeds)"
    )
    more = "more test images" if verdict.test_half >= verdict.seed_half else "more seeds (--seeds)"
    return f"Noise: {seeds}, {test}; {more} would narrow it most."


def fit_line(records: list[CellResult], learning: list[str], epochs: int) -> str:
    """How far each row fitted its own training images (unaugmented) at the end; whether it still learned."""
    fits = []
    for label in (VIT, CNN):
        fit = row_mean(records, label, "fit_acc")
        fits.append(f"the {label} {'-' if fit is None else f'{fit:.1f}'} %")
    line = f"Fit after {counted(epochs, 'epoch')}: {', '.join(fits)} of their training images (unaugmented)"
    if learning:
        return line + f"; {' and '.join(learning)} still learning: more --epochs may change the verdict."
    if not any(loss_fall(record, "") is not None for record in records):
        return line + "; too few epochs to tell whether they still learn."
    return line + "; both had fitted or plateaued."


def kept_comparison(train_images: int) -> list[str]:
    """What the results page found for this comparison (its kept runs, read as the page reads them), the
    size nearest `train_images` first; a line saying where to read it where this installation lacks them."""
    try:
        results, _ = results_paths()
    except ConfigError:
        sizes = "100, 300 and 1,000 images"
        return [f"The results page's comparison at {sizes}: docs/own-models.md (not kept here)."]
    found = []
    for size, grid in sorted(KEPT_GRIDS.items(), key=lambda kv: abs(math.log(kv[0] / max(train_images, 1)))):
        records = find_runs(results / grid, skipped=[])
        vit, cnn = seed_values(records, KEPT_VIT, "final_acc"), seed_values(records, KEPT_CNN, "final_acc")
        difference = paired_difference(vit, cnn)
        if difference is not None:
            found.append(
                f"at {size:,} training images the ViT reached {mean_std(vit)} against the CNN's "
                f"{mean_std(cnn)}: {difference.describe()}"
            )
    if not found:
        return []
    return [
        "The results page (Fashion-MNIST, timm's ViT with the recipe against this ConvMixer, crop+flip, 300 "
        "epochs, 1,500 at 100 images, 10,000 test images; final test accuracy, %): " + "; ".join(found) + "."
    ]


def vit_or_cnn(
    overrides: list[str] | dict[str, Any] | None = None,
    out: str | Path = "runs/vit-or-cnn",
    seeds: list[int] | None = None,
    epochs: int | None = None,
    quick: bool = False,
    jobs: int = 1,
    progress: bool = True,
) -> tuple[Verdict, list[str], dict[str, str]]:
    """Train the recommended ViT and the CNN of its size on the data `overrides` name, and say which to
    choose and how sure: (the verdict, its lines as printed and written to out/verdict.md, the last grid's
    outcome {run dir: what was done}). Rerunning with the same arguments continues where it stopped."""
    plan = plan_comparison(overrides, seeds, epochs, quick)
    for note in plan.notes:
        say_once(note)
    folder, records, outcome, learning = train_comparison(plan, Path(out), jobs, progress, quick)
    report = write_report(folder, title="ViT or CNN")
    verdict = judge(records, test_images(records) or plan.test_images)
    vit, cnn = seed_values(records, VIT, "final_acc"), seed_values(records, CNN, "final_acc")
    epochs_run = int(records[0].metrics[-1]["epoch"])
    learns = f" ({' and '.join(learning)} still learning: see the fit below)" if learning else ""
    lines = [
        answer_line(verdict) + learns,
        f"Final test accuracy (%): the ViT {mean_std(vit)}, the CNN {mean_std(cnn)}; per seed, ViT minus "
        f"CNN {verdict.difference.describe()}.",
        noise_line(verdict),
        fit_line(records, learning, epochs_run),
        *kept_comparison(plan.train_images),
        f"Report: {report}",
    ]
    text = ["# ViT or CNN", "", *[f"- {note}" for note in plan.notes], "", *lines]
    atomic_write_text(Path(out) / "verdict.md", "\n".join(text) + "\n")
    return verdict, lines, outcome
