"""Run a grid of training runs, resumably: finished runs are skipped, interrupted ones resumed.

Launchers: `local` runs one after another in this process, or `jobs` at once as subprocesses;
`slurm` submits one submitit job per run (partition, GPUs and time from the options).
Each run directory gets `experiment.json` (experiment, row label, seed, preset, paper number) beside
the trainer's own files, which is what `convinit report` reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from convinit.config import save_config
from convinit.experiments.grid import RunSpec
from convinit.provenance import provenance
from convinit.train import train
from convinit.train.checkpoint import latest_checkpoint

LAUNCHERS = ("local", "slurm")


def run_state(run_dir: Path) -> str:
    """'finished', 'partial' (resume it) or 'new'."""
    if (run_dir / "finished.json").exists():
        return "finished"
    return "partial" if (run_dir / "config.yaml").exists() else "new"


def start_outcome(run_dir: Path) -> str:
    """What running `run_dir` will do: 'trained' from scratch, or 'resumed from <checkpoint>'."""
    checkpoint = latest_checkpoint(run_dir)
    return "trained" if checkpoint is None else f"resumed from {checkpoint.name}"


def write_experiment_record(spec: RunSpec, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "experiment": spec.experiment,
        "label": spec.label,
        "seed": spec.seed,
        "preset": spec.preset,
        "paper": spec.paper,
        "row": spec.row,
        **spec.extra,
        **provenance(),
    }
    (run_dir / "experiment.json").write_text(json.dumps(record, indent=1))


def subprocess_command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "convinit", "train", "--no-progress", "--resume", str(run_dir)]


def run_grid(
    runs: Iterable[RunSpec],
    out: Path,
    launcher: str = "local",
    jobs: int = 1,
    progress: bool = True,
    slurm_options: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Run every spec into out/<row>/seed<k>; returns {run dir: what was done}.

    What was done: trained, resumed from <checkpoint>, skipped (finished before) or submitted <job id>.
    """
    runs = list(runs)
    outcome: dict[str, str] = {}
    todo = []
    for spec in runs:
        run_dir = out / spec.dirname
        if run_state(run_dir) == "finished":
            outcome[str(run_dir)] = "skipped"
            continue
        if run_state(run_dir) == "new":  # write the config so every launcher can start with --resume
            write_experiment_record(spec, run_dir)
            save_config(spec.config, run_dir / "config.yaml")
        todo.append((spec, run_dir))
    if launcher == "slurm":
        from convinit.experiments.launchers import submit_slurm

        for run_dir, job in submit_slurm([d for _, d in todo], out, **(slurm_options or {})).items():
            outcome[run_dir] = f"submitted {job.job_id}"
        return outcome
    if jobs > 1:

        def launch(item: tuple[RunSpec, Path]) -> tuple[str, str]:
            started = start_outcome(item[1])
            result = subprocess.run(subprocess_command(item[1]), capture_output=True, text=True)
            failed = f"failed: {result.stderr.strip()[-300:]}"
            return str(item[1]), started if result.returncode == 0 else failed

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcome.update(dict(pool.map(launch, todo)))
        return outcome
    for _spec, run_dir in todo:
        started = start_outcome(run_dir)
        train(None, run_dir=run_dir, resume=True, progress=progress)
        outcome[str(run_dir)] = started
    return outcome
