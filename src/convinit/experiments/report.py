"""Turn any directory of runs into a paper-style table (Markdown and CSV) with plots.

Final-epoch test accuracy (never the best epoch), mean +- std over seeds, the paper's number beside
ours where the experiment preset has one. Every row lists the runs it aggregates with their config,
seed, convinit version and git commit.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convinit.analysis.init_summary import init_markdown, init_rows
from convinit.atomic import atomic_write_text, atomic_writer
from convinit.config import load_config
from convinit.errors import ConfigError
from convinit.train.metrics import read_metrics


@dataclass
class RunRecord:
    run_dir: Path
    label: str
    seed: int
    metrics: list[dict[str, Any]]
    config: dict[str, Any]
    experiment: dict[str, Any] = field(default_factory=dict)

    @property
    def final_accuracy(self) -> float | None:
        evaluated = [row for row in self.metrics if row.get("test_acc") is not None]
        return (
            evaluated[-1]["test_acc"]
            if evaluated and evaluated[-1]["epoch"] == self.metrics[-1]["epoch"]
            else None
        )


def read_experiment(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "experiment.json"
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_bytes())
    except ValueError as exc:
        raise ConfigError(f"{path} is damaged ({exc}); delete it or rerun the grid to rewrite it") from exc
    if not isinstance(record, dict):
        raise ConfigError(f"{path} is damaged (not a JSON object); delete it or rerun the grid to rewrite it")
    return record


def run_label(run_dir: Path, root: Path, experiment: dict[str, Any]) -> str:
    return experiment.get("label") or run_dir.relative_to(root).parent.as_posix() or run_dir.name


def find_runs(root: Path) -> list[RunRecord]:
    """Every finished run under `root` (folders with config.yaml, metrics.jsonl and finished.json)."""
    records = []
    for config_path in sorted(root.rglob("config.yaml")):
        run_dir = config_path.parent
        if not (run_dir / "finished.json").exists() or not (run_dir / "metrics.jsonl").exists():
            continue
        config = load_config(config_path).to_dict()  # a damaged config.yaml is refused in one line
        experiment = read_experiment(run_dir)
        metrics = read_metrics(run_dir / "metrics.jsonl")
        if not metrics:
            continue
        label = run_label(run_dir, root, experiment)
        records.append(RunRecord(run_dir, label, int(config.get("seed", 0)), metrics, config, experiment))
    return sorted(records, key=lambda r: r.experiment.get("row", 0))  # stable: path order within a row


def find_failed(root: Path) -> list[tuple[str, int, str]]:
    """(label, seed, reason) of every run under `root` that failed (see `runner.record_failure`)."""
    failures = []
    for path in sorted(root.rglob("failed.json")):
        run_dir = path.parent
        if (run_dir / "finished.json").exists():
            continue
        experiment = read_experiment(run_dir)
        try:
            reason = str(json.loads(path.read_bytes()).get("reason", "unknown"))
        except (ValueError, AttributeError):
            reason = "unknown (failed.json is damaged)"
        failures.append((run_label(run_dir, root, experiment), int(experiment.get("seed", 0)), reason))
    return failures


def summarise(records: list[RunRecord]) -> list[dict[str, Any]]:
    """One table row per label, in first-seen order."""
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[record.label].append(record)
    rows = []
    for label, group in groups.items():
        accs = [r.final_accuracy for r in group if r.final_accuracy is not None]
        last = [r.metrics[-1] for r in group]
        rows.append(
            {
                "method": label,
                "seeds": len(accs),
                "final_test_acc_mean": statistics.fmean(accs) if accs else None,
                "final_test_acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0 if accs else None,
                "paper": group[0].experiment.get("paper"),
                "epochs": last[0]["epoch"],
                "seconds": sum(row.get("seconds", 0.0) for r in group for row in r.metrics) / len(group),
                "images_per_s": statistics.fmean([row.get("images_per_s", 0.0) for row in last]),
                "provenance": "; ".join(
                    f"{r.run_dir.name}: seed {r.seed}, {r.experiment.get('preset', 'config.yaml')}, "
                    f"convinit {r.experiment.get('convinit_version', '?')} "
                    f"@ {r.experiment.get('git_commit', '?')[:12]}"
                    for r in group
                ),
            }
        )
    return rows


def format_accuracy(row: dict[str, Any]) -> str:
    if row["final_test_acc_mean"] is None:
        return "n/a"
    if row["seeds"] > 1:
        return f"{row['final_test_acc_mean']:.2f} +- {row['final_test_acc_std']:.2f}"
    return f"{row['final_test_acc_mean']:.2f}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| method | seeds | final test acc (%) | paper (%) | epochs | s / run | images/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        paper = f"{row['paper']:.1f}" if isinstance(row["paper"], (int, float)) else "-"
        lines.append(
            f"| {row['method']} | {row['seeds']} | {format_accuracy(row)} | {paper} | {row['epochs']} | "
            f"{row['seconds']:.0f} | {row['images_per_s']:.0f} |"
        )
    return "\n".join(lines)


def plot_curves(records: list[RunRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[record.label].append(record)
    for label, group in groups.items():
        by_epoch: dict[int, list[float]] = defaultdict(list)
        for record in group:
            for row in record.metrics:
                if row.get("test_acc") is not None:
                    by_epoch[row["epoch"]].append(row["test_acc"])
        epochs = sorted(by_epoch)
        ax.plot(epochs, [statistics.fmean(by_epoch[e]) for e in epochs], marker=".", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_writer(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)


def plot_sweep(records: list[RunRecord], key: str, path: Path, xlabel: str, log_x: bool = False) -> bool:
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
    for group, values in points.items():
        xs = sorted(values)
        means = [statistics.fmean(values[x]) for x in xs]
        stds = [statistics.stdev(values[x]) if len(values[x]) > 1 else 0.0 for x in xs]
        ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=group)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_writer(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return True


def write_report(root: str | Path, out: str | Path | None = None, title: str | None = None) -> Path:
    """Write report.md, results.csv and plots for the runs under `root`; returns the report path."""
    root = Path(root)
    records, failures = find_runs(root), find_failed(root)
    if not records and not failures:
        raise ConfigError(f"{root} holds no finished runs (folders with config.yaml and finished.json)")
    out = Path(out) if out else root
    out.mkdir(parents=True, exist_ok=True)
    rows = summarise(records)
    if rows:
        table = io.StringIO(newline="")
        writer = csv.DictWriter(table, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(out / "results.csv", table.getvalue())
        plot_curves(records, out / "curves.png")
    parts = [
        f"# {title or 'Results: ' + root.name}",
        "",
        markdown_table(rows),
        "",
        "Final-epoch test accuracy, mean +- std over seeds (never the best epoch).",
    ]
    if rows:
        parts += ["", "![curves](curves.png)"]
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
    groups: dict[str, list[Path]] = defaultdict(list)
    for record in records:
        groups[record.label].append(record.run_dir)
    init_table = init_markdown(init_rows(groups.items()))
    if init_table:
        parts += ["", init_table]
    parts += ["", "## Provenance", ""] + [f"- **{row['method']}**: {row['provenance']}" for row in rows]
    report = out / "report.md"
    atomic_write_text(report, "\n".join(parts) + "\n")
    return report
