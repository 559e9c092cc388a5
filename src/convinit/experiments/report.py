"""Turn any directory of runs into a paper-style table (Markdown and CSV) with plots.

A row is one configuration: runs are grouped by their label and by every config key but the seed
(and keys that do not change what is trained: where data lives, logging, tracking), so a row never
averages different settings; runs that share a label but not a config become separate rows named by
what differs. Per row: final-epoch test accuracy (never the best epoch), mean +- std over seeds; the
paired per-seed difference against the first row with its 95 % interval (`convinit.experiments.paired`);
the attention's convolutional bias at step 0 and at the end (`track=[init_quality]`); the paper's
number where the experiment preset has one; the runs it aggregates with seed, convinit version and
git commit.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convinit.analysis.init_summary import init_markdown, init_rows
from convinit.config import load_config
from convinit.errors import ConfigError
from convinit.experiments.paired import paired_difference
from convinit.runs.metrics import parse_row, read_metrics
from convinit.runs.run_dir import CONFIG_FILE
from convinit.runs.track_log import TRACK_FILE, TRACK_ROW_KEYS
from convinit.system.atomic import atomic_write_text, atomic_writer
from convinit.system.read_back import read_capped, short_repr

# config keys that do not change what a run trains: runs differing only in these share a row
NOT_THE_EXPERIMENT = {
    "seed", "data_dir", "download", "logger", "log_every", "track", "track_every", "eval_every",
    "eval_batch_size", "workers",
}  # fmt: skip
BIAS_KEYS = ("init_quality/target_mass", "init_quality/best_offset_mass")  # plotted through training
TRACKED_KEYS = (*BIAS_KEYS, "init_quality/entropy")  # tabulated at step 0 and at the end


@dataclass
class CellResult:
    """One finished run of a grid cell (a row label and a seed), read back: its metrics and config."""

    run_dir: Path
    label: str
    seed: int
    metrics: list[dict[str, Any]]
    config: dict[str, Any]
    experiment: dict[str, Any] = field(default_factory=dict)

    @property
    def setting(self) -> dict[str, Any]:
        """The flattened config without the seed and the keys that do not change the run."""
        flat = flatten_config(self.config)
        return {k: v for k, v in flat.items() if k.split(".")[0] not in NOT_THE_EXPERIMENT}

    @property
    def provenance(self) -> str:
        """'seed 0, preset, convinit 0.1.0 @ abcdef123456' from experiment.json or provenance.json."""
        about = {**read_json(self.run_dir / "provenance.json"), **self.experiment}
        where = about.get("preset", CONFIG_FILE)
        if "git_commit" not in about:
            return f"{self.run_dir.name}: seed {self.seed}, {where}, convinit version and commit not recorded"
        return (
            f"{self.run_dir.name}: seed {self.seed}, {where}, convinit {about.get('convinit_version')} "
            f"@ {str(about['git_commit'])[:12]}"
        )

    def bias(self, key: str) -> tuple[float | None, float | None]:
        """A tracker figure at step 0 (the epoch-0 evaluation, or track.jsonl's step-0 row of a run with
        eval_every=0) and at the end (the last row), or None."""
        first = self.metrics[0] if self.metrics[0].get("epoch") == 0 else {}
        if key not in first:
            first = next((r for r in read_metrics(self.run_dir / TRACK_FILE) if r.get("step") == 0), {})
        return first.get(key), self.metrics[-1].get(key)

    @property
    def final_accuracy(self) -> float | None:
        evaluated = [row for row in self.metrics if row.get("test_acc") is not None]
        return (
            evaluated[-1]["test_acc"]
            if evaluated and evaluated[-1]["epoch"] == self.metrics[-1]["epoch"]
            else None
        )


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'model_args': {'alpha': 0.1}} -> {'model_args.alpha': 0.1}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def read_json(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(read_capped(path))
    except (OSError, ValueError, RecursionError):  # ConfigError (not a regular file, too large) is one
        return {}
    return record if isinstance(record, dict) else {}


# experiment.json's fields (`runner.write_experiment_record`, grid extras, provenance) and their types
TEXT_FIELDS = ("experiment", "label", "preset", "group", "method", "git_commit", "convinit_version")
COUNT_FIELDS = ("seed", "row", "train_images")
NUMBER_FIELDS = ("paper", "alpha", "fraction")


def experiment_problem(record: Any) -> str | None:
    """The first field of an experiment.json record whose type the report cannot use, in words."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for key, value in record.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if key in TEXT_FIELDS and not isinstance(value, str):
            return f"field {key!r} must be text, got {short_repr(value)}"
        if key in COUNT_FIELDS and not (number and isinstance(value, int) and value >= 0):
            return f"field {key!r} must be a count (0, 1, ...), got {short_repr(value)}"
        if key in NUMBER_FIELDS and not (number or (key == "paper" and value is None)):
            return f"field {key!r} must be a finite number, got {short_repr(value)}"
    return None


def read_experiment(run_dir: Path) -> dict[str, Any]:
    """A run's experiment.json (grid runs write it); {} for a run without one."""
    path = run_dir / "experiment.json"
    if not path.exists():
        return {}
    try:
        record = json.loads(read_capped(path))
        problem = experiment_problem(record)
    except (OSError, ValueError, RecursionError) as exc:
        problem = " ".join(str(exc).split())[:160]
    if problem is not None:
        raise ConfigError(f"{path} is damaged ({problem}); delete it or rerun the grid to rewrite it")
    return record


def run_label(run_dir: Path, root: Path, experiment: dict[str, Any]) -> str:
    return experiment.get("label") or run_dir.relative_to(root).parent.as_posix() or run_dir.name


RUN_MARKERS = (CONFIG_FILE, "metrics.jsonl", "finished.json", "experiment.json")  # a run folder holds one


def find_runs(root: Path, skipped: list[tuple[Path, str]] | None = None) -> list[CellResult]:
    """Every finished run under `root` (folders with config.yaml, metrics.jsonl and finished.json).

    Every other folder that holds a run's files (unfinished, failed, finished without its config or
    metrics, a finished.json that is damaged or disagrees with metrics.jsonl) is named with the reason:
    appended to `skipped`, or, without a list, in one warning each; never dropped without a word."""
    records, left_out = [], []
    folders = sorted({path.parent for name in RUN_MARKERS for path in root.rglob(name)})
    for run_dir in folders:
        found = read_run(run_dir, root)
        if isinstance(found, CellResult):
            records.append(found)
        else:
            left_out.append((run_dir, found))
    if skipped is None:
        for run_dir, reason in left_out:
            warnings.warn(f"{run_dir} is left out of the report: {reason}", stacklevel=2)
    else:
        skipped.extend(left_out)
    return sorted(records, key=lambda r: r.experiment.get("row", 0))  # stable: path order within a row


def read_run(run_dir: Path, root: Path) -> CellResult | str:
    """The finished run in `run_dir`, or why it gives no final figure.

    The final row is the one `finished.json` records (the trainer writes it when the run ends), never
    merely the last intact line of metrics.jsonl: a cut last line must not make epoch 19 the final one
    of a 20-epoch run."""
    if not (run_dir / "finished.json").exists():
        failed = (run_dir / "failed.json").exists()
        if failed:
            return f"it failed: {failure_reason(run_dir / 'failed.json').splitlines()[0]} (its failed.json)"
        return "it is not finished (no finished.json)"
    for name in (CONFIG_FILE, "metrics.jsonl"):
        if not (run_dir / name).exists():
            return f"it is finished but has no {name}; restore it from a copy or rerun the run"
    finished = read_finished(run_dir / "finished.json")
    if isinstance(finished, str):
        return finished
    config = load_config(run_dir / CONFIG_FILE).to_dict()  # a damaged config.yaml is refused in one line
    experiment = read_experiment(run_dir)
    epoch, metrics = finished["epoch"], read_metrics(run_dir / "metrics.jsonl")
    last = next((row for row in reversed(metrics) if row["epoch"] == epoch), finished)  # a cut line: finished
    if last.get("test_acc") != finished["test_acc"]:
        return (
            f"metrics.jsonl gives epoch {epoch} test_acc {short_repr(last.get('test_acc'))} but "
            f"finished.json {finished['test_acc']}; one was edited: restore the run from a copy or rerun it"
        )
    rows = [row for row in metrics if row["epoch"] < epoch] + [last]
    label = run_label(run_dir, root, experiment)
    return CellResult(run_dir, label, int(config.get("seed", 0)), rows, config, experiment)


def read_finished(path: Path) -> dict[str, Any] | str:
    """finished.json's row (the run's last metrics row), or what is wrong with it."""
    try:
        row, problem = parse_row(read_capped(path).decode("utf-8", "replace"), ("epoch",))
    except OSError as exc:
        row, problem = {}, exc.strerror or str(exc)
    if problem is None and not is_number(row.get("test_acc")):
        problem = f"'test_acc' is {short_repr(row.get('test_acc'))}, not a number"
    if problem is not None:
        return f"its finished.json is damaged ({problem}); restore the run from a copy or rerun it"
    return row


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def find_failed(root: Path) -> list[tuple[str, int, str]]:
    """(label, seed, reason) of every run under `root` that failed (see `runner.record_failure`)."""
    failures = []
    for path in sorted(root.rglob("failed.json")):
        run_dir = path.parent
        if (run_dir / "finished.json").exists():
            continue
        experiment = read_experiment(run_dir)
        reason = failure_reason(path)
        failures.append((run_label(run_dir, root, experiment), int(experiment.get("seed", 0)), reason))
    return failures


def failure_reason(path: Path) -> str:
    """The reason a failed.json records (`runner.record_failure`), at most 500 characters; never empty."""
    try:
        reason = str(json.loads(read_capped(path)).get("reason", "unknown"))[:500]
    except (ConfigError, OSError, ValueError, AttributeError, RecursionError):  # too large, unreadable
        reason = "unknown (failed.json is damaged)"
    return reason.strip() or "unknown (failed.json gives no reason)"


def group_runs(records: list[CellResult]) -> list[tuple[str, list[CellResult]]]:
    """(row name, runs) in first-seen order: one row per label and setting; a label whose runs hold
    several settings gives one row per setting, named by the keys whose values differ."""
    groups: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for record in records:
        groups[(record.label, json.dumps(record.setting, sort_keys=True, default=str))].append(record)
    by_label: dict[str, list[list[CellResult]]] = defaultdict(list)
    for (label, _), group in groups.items():
        by_label[label].append(group)
    named = []
    for (label, _), group in groups.items():
        siblings = by_label[label]
        if len(siblings) == 1 and label != ".":
            named.append((label, group))
            continue
        settings = [g[0].setting for g in siblings]
        keys = sorted({k for st in settings for k in st if len({str(x.get(k)) for x in settings}) > 1})
        differs = ", ".join(f"{k}={group[0].setting.get(k)}" for k in keys)
        name = label if label != "." else ""
        named.append((f"{name} [{differs}]".strip() if differs else name or group[0].run_dir.name, group))
    return named


def ordered_groups(records: list[CellResult], reference: str | None) -> list[tuple[str, list[CellResult]]]:
    """`group_runs`, with the `reference` row first; ConfigError naming the rows if there is none."""
    groups = group_runs(records)
    if reference is None:
        return groups
    first = [g for g in groups if g[0] == reference]
    if not first:
        names = ", ".join(repr(label) for label, _ in groups)
        raise ConfigError(f"--reference {reference!r} is not a row of this report; its rows: {names}")
    return first + [g for g in groups if g[0] != reference]


def summarise(records: list[CellResult], reference: str | None = None) -> list[dict[str, Any]]:
    """One table row per configuration (`group_runs`), in first-seen order or `reference` first; each
    row's paired difference is against the first row."""
    rows, reference_accs = [], None
    for label, group in ordered_groups(records, reference):
        by_seed = {r.seed: r.final_accuracy for r in group if r.final_accuracy is not None}
        accs = list(by_seed.values())
        last = [r.metrics[-1] for r in group]
        reference_accs = by_seed if reference_accs is None else reference_accs
        paired = paired_difference(by_seed, reference_accs) if rows else None
        row = {
            "method": label,
            "seeds": len(accs),
            "final_test_acc_mean": statistics.fmean(accs) if accs else None,
            "final_test_acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0 if accs else None,
            "vs_first_row": paired.describe() if paired else None,
            "vs_first_row_within_noise": paired.within_noise if paired else None,
            "paper": group[0].experiment.get("paper"),
            "epochs": last[0]["epoch"],
            "seconds": sum(row.get("seconds") or 0.0 for r in group for row in r.metrics) / len(group),
            "images_per_s": statistics.fmean([row.get("images_per_s") or 0.0 for row in last]),
        }
        for key in TRACKED_KEYS:
            name = key.split("/")[-1]
            for index, when in enumerate(("step0", "end")):
                values = [r.bias(key)[index] for r in group if r.bias(key)[index] is not None]
                row[f"{name}_{when}"] = statistics.fmean(values) if values else None
        row["provenance"] = "; ".join(r.provenance for r in group)
        rows.append(row)
    return rows


def format_accuracy(row: dict[str, Any]) -> str:
    if row["final_test_acc_mean"] is None:
        return "n/a"
    if row["seeds"] > 1:
        return f"{row['final_test_acc_mean']:.2f} +- {row['final_test_acc_std']:.2f}"
    return f"{row['final_test_acc_mean']:.2f}"


def step0_and_end(row: dict[str, Any], name: str) -> str:
    start, end = row.get(f"{name}_step0"), row.get(f"{name}_end")
    if start is None and end is None:
        return "-"
    return " / ".join("-" if v is None else f"{v:.2f}" for v in (start, end))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The accuracy table; bias columns only when some run tracked init_quality."""
    bias = any(row.get(f"{k.split('/')[-1]}_step0") is not None for row in rows for k in BIAS_KEYS)
    head = "| method | seeds | final test acc (%) | vs first row (points, 95 % CI) |"
    rule = "| --- | ---: | ---: | ---: |"
    if bias:
        head += " target mass, step 0 / end | best-offset mass, step 0 / end | entropy, step 0 / end |"
        rule += " ---: | ---: | ---: |"
    lines = [head + " paper (%) | epochs | s / run | images/s |", rule + " ---: | ---: | ---: | ---: |"]
    for index, row in enumerate(rows):
        paper = f"{row['paper']:.1f}" if isinstance(row["paper"], (int, float)) else "-"
        versus = "reference" if index == 0 else row["vs_first_row"] or "no shared seed"
        cells = [row["method"], str(row["seeds"]), format_accuracy(row), versus]
        if bias:
            cells += [step0_and_end(row, name) for name in ("target_mass", "best_offset_mass", "entropy")]
        cells += [paper, str(row["epochs"]), f"{row['seconds']:.0f}", f"{row['images_per_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_images(records: list[CellResult]) -> int | None:
    """The smallest test set the runs were evaluated on (their `preprocessing.json`), None if unrecorded."""
    counts = [read_json(r.run_dir / "preprocessing.json").get("test_images") for r in records]
    counts = [n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    return min(counts) if counts else None


def resolution_note(test_count: int | None, accuracies: list[float]) -> str | None:
    """What a comparison on `test_count` images can separate, when it cannot separate rows a point
    apart: a row's accuracy p (%) on n test images has the binomial standard error sqrt(p (1 - p) / n),
    and differences under two of them (at the rows' accuracies) are within that row's test-set noise.
    None for a test set that resolves under a point at every accuracy given, or no figures."""
    values = [a for a in accuracies if a is not None and math.isfinite(a)]
    if not test_count or not values:
        return None
    margins = sorted(200 * math.sqrt(a / 100 * (1 - a / 100) / test_count) for a in values)
    if margins[-1] < 1.0:
        return None
    low, high = min(values), max(values)
    at = f"{low:.1f} %" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} %"
    spread = (
        f"{margins[-1]:.1f}" if margins[0] > margins[-1] - 0.05 else f"{margins[0]:.1f}-{margins[-1]:.1f}"
    )
    return (
        f"The test set has {test_count:,} images: one image is {100 / test_count:.2g} points; at the rows' "
        f"accuracies ({at}) two binomial standard errors are {spread} points, so rows whose accuracies "
        "differ by less than that cannot be told apart on this test set."
    )


def save_plot(fig, ax, path: Path, legend_size: int = 8, title: str | None = None) -> None:
    """Title, grid, legend and an atomic PNG write; the figure is closed."""
    import matplotlib.pyplot as plt

    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    with atomic_writer(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)


def plot_curves(records: list[CellResult], path: Path, title: str = "Test accuracy after each epoch") -> None:
    """Test accuracy against the epoch (whole epochs on the axis), one line per row, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups = group_runs(records)
    for label, group in groups:
        by_epoch: dict[int, list[float]] = defaultdict(list)
        for record in group:
            for row in record.metrics:
                if row.get("test_acc") is not None:
                    by_epoch[row["epoch"]].append(row["test_acc"])
        epochs = sorted(by_epoch)
        ax.plot(epochs, [statistics.fmean(by_epoch[e]) for e in epochs], marker=".", label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # evaluations happen at whole epochs
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    lengths = epoch_counts(groups)
    if len(set(lengths)) > 1:  # one axis, schedules of different lengths: the title says so
        title = f"{title}\n(rows ran {min(lengths)} to {max(lengths)} epochs: each line ends at its own last)"
    save_plot(fig, ax, path, legend_size=8, title=title)


def epoch_counts(groups: list[tuple[str, list[CellResult]]]) -> list[int]:
    """The number of epochs each row's runs trained (their last metrics row)."""
    return [max(r.metrics[-1]["epoch"] for r in group) for _, group in groups]


def dodged(xs: list[float], index: int, count: int, span: tuple[float, float], log_x: bool) -> list[float]:
    """`xs` moved sideways by row `index` of `count`, by 2 % of the axis's span (`span`, the lowest and
    highest x of all rows) per row, so that rows measured at the same x do not draw their error bars over
    each other; centred on the true x. On a log axis the shift is a factor."""
    shift = 0.02 * (index - (count - 1) / 2)
    low, high = span
    if log_x:
        decades = math.log10(high / low) if high > low else 1.0
        return [x * 10 ** (shift * decades) for x in xs]
    return [x + shift * ((high - low) or 1.0) for x in xs]


def plot_sweep(records: list[CellResult], key: str, path: Path, xlabel: str, log_x: bool = False) -> bool:
    """Accuracy against an experiment key (alpha, number of training images), one line per `group`."""
    points: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if key in record.experiment and record.final_accuracy is not None:
            group = record.experiment.get("group", record.experiment.get("method", "runs"))
            points[group][float(record.experiment[key])].append(record.final_accuracy)
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    measured = sorted({x for values in points.values() for x in values})
    for index, (group, values) in enumerate(points.items()):
        xs = sorted(values)
        means = [statistics.fmean(values[x]) for x in xs]
        stds = [statistics.stdev(values[x]) if len(values[x]) > 1 else 0.0 for x in xs]
        shown = dodged(xs, index, len(points), (measured[0], measured[-1]), log_x)
        ax.errorbar(shown, means, yerr=stds, marker="o", capsize=3, label=group)
    if log_x:
        log_axis_at(ax, sorted({x for values in points.values() for x in values}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final test accuracy (%)")
    title = f"Final test accuracy against {xlabel} (mean ± std over seeds)"
    if len(points) > 1:
        title += "\nrows set slightly apart at each x so their bars do not overlap"
    save_plot(fig, ax, path, legend_size=8, title=title)
    return True


def log_axis_at(ax, xs: list[float]) -> None:
    """A log x axis labelled at the measured values only (two sizes otherwise get one decade tick, or
    none, and unlabelled minor ticks), with room either side so no point sits on the frame."""
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.minorticks_off()
    low, high = min(xs), max(xs)
    pad = (high / low) ** 0.08 if high > low else 2.0
    ax.set_xlim(low / pad, high * pad)


BIAS_NOTE = (
    "Convolutional bias (`track=[init_quality]`, real forward passes of 64 held-apart test images): target "
    "mass is the attention on each head's impulse-init offset, best-offset mass the attention on the single "
    "offset of a 5 x 5 kernel that gets the most, per head; entropy the row entropy / log(keys) (1: "
    "uniform, 0: one-hot); means over layers, heads and seeds, at step 0 and after the last step. The plot "
    "follows the masses through training (solid: target, dashed: best offset)."
)


def bias_points(record: CellResult, key: str) -> dict[int, float]:
    """{global step: value} of a tracker figure from the evaluations and track.jsonl."""
    points = {
        int(row.get("step", 0)): row[key]
        for row in record.metrics
        if row.get(key) is not None and ("step" in row or row["epoch"] == 0)
    }
    for row in read_metrics(record.run_dir / TRACK_FILE, TRACK_ROW_KEYS):
        if row.get(key) is not None:
            points[row["step"]] = row[key]
    return points


def plot_bias(records: list[CellResult], path: Path) -> bool:
    """Target and best-offset mass against the training step, one colour per row; False if untracked."""
    lines = []
    for label, group in group_runs(records):
        for key, style in zip(BIAS_KEYS, ("-", "--"), strict=True):
            by_step: dict[int, list[float]] = defaultdict(list)
            for record in group:
                for step, value in bias_points(record, key).items():
                    by_step[step].append(value)
            if by_step:
                steps = sorted(by_step)
                lines.append((label, style, steps, [statistics.fmean(by_step[t]) for t in steps]))
    if not lines:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours: dict[str, str] = {}
    for label, style, steps, values in lines:
        named = label in colours  # one legend entry per row
        colour = colours.setdefault(label, f"C{len(colours) % 10}")
        ax.plot(steps, values, style, marker=".", color=colour, label=None if named else label)
    ax.set_xlabel("training step")
    ax.set_ylabel("attention mass (solid: target, dashed: best offset)")
    ax.set_ylim(0, 1)
    save_plot(fig, ax, path, legend_size=7, title="Attention on the convolutional offsets through training")
    return True


def write_report(
    root: str | Path, out: str | Path | None = None, title: str | None = None, reference: str | None = None
) -> Path:
    """Write report.md, results.csv and plots for the runs under `root`; returns the report path.

    reference: the row (label) the others are paired with, shown first (default: the first row).
    A folder that cannot be written (full, read-only) is refused in one line naming it."""
    root = Path(root)
    records, failures = find_runs(root), find_failed(root)
    if not records and not failures:
        raise ConfigError(f"{root} holds no finished runs (folders with config.yaml and finished.json)")
    out = Path(out) if out else root
    rows = summarise(records, reference)
    try:
        out.mkdir(parents=True, exist_ok=True)
        return write_report_files(records, failures, rows, out, title or "Results: " + root.name)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the report into {out} ({exc.strerror or exc}); free space there or choose "
            "another --out"
        ) from exc


def write_report_files(
    records: list[CellResult],
    failures: list[tuple[str, int, str]],
    rows: list[dict[str, Any]],
    out: Path,
    title: str,
) -> Path:
    """report.md, results.csv and the plots of `write_report`, in `out`."""
    if rows:
        table = io.StringIO(newline="")
        writer = csv.DictWriter(table, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(out / "results.csv", table.getvalue())
        plot_curves(records, out / "curves.png", f"{title}: test accuracy after each epoch")
    parts = [
        f"# {title}",
        "",
        markdown_table(rows),
        "",
        "Final-epoch test accuracy, mean +- std over seeds (never the best epoch); vs first row: the mean "
        "of the per-seed differences from the first row over the seeds both ran, with its 95 % t interval "
        "(labelled within noise when it contains 0).",
    ]
    note = resolution_note(test_images(records), [row["final_test_acc_mean"] for row in rows])
    if note:
        parts += ["", note]
    if rows:
        parts += ["", "![curves](curves.png)"]
    lengths = sorted({row["epochs"] for row in rows})
    if len(lengths) > 1:
        parts += [
            "",
            f"The rows ran different numbers of epochs ({', '.join(map(str, lengths))}): each curve ends at "
            "its own last epoch, and at any one epoch the curves compare runs at different points of their "
            "schedules (learning rate, warm-up); the table's final accuracies compare finished runs.",
        ]
    if plot_sweep(records, "alpha", out / "alpha_sweep.png", "alpha"):
        parts += ["", "![alpha sweep](alpha_sweep.png)"]
    # sample efficiency: `convinit efficiency` records image counts, grids (ConViT Table 2) fractions
    efficiency = out / "efficiency.png"
    if plot_sweep(records, "train_images", efficiency, "training images", log_x=True) or plot_sweep(
        records, "fraction", efficiency, "fraction of the training set", log_x=True
    ):
        parts += ["", "![sample efficiency](efficiency.png)"]
    if failures:
        parts += ["", "## Failed runs", "", "| method | seed | reason |", "| --- | ---: | --- |"]
        parts += [f"| {label} | {seed} | {reason} |" for label, seed, reason in failures]
    if plot_bias(records, out / "bias.png"):
        parts += ["", BIAS_NOTE, "", "![convolutional bias through training](bias.png)"]
    groups = [(label, [r.run_dir for r in group]) for label, group in group_runs(records)]
    init_table = init_markdown(init_rows(groups))
    if init_table:
        parts += ["", init_table]
    parts += ["", "## Provenance", ""] + [f"- **{row['method']}**: {row['provenance']}" for row in rows]
    report = out / "report.md"
    atomic_write_text(report, "\n".join(parts) + "\n")
    return report
