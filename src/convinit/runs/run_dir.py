"""What a run directory may hold before `train` writes into it, and the files it leaves there.

`--out DIR` starts a new run: refused on a finished run or an unfinished one (continue it with
`--resume`), unless `--overwrite` asks for a clean start, which removes the previous run's files and
its checkpoints (only convinit's own: see `convinit.runs.checkpoint`). A run that stopped before it had
anything to continue (no checkpoint, no metrics past step 0: a config refused once the data was read, a
kill while loading) is reclaimed by the next `--out` on its folder, the same command or a corrected
one: resuming it would only start over. A path that cannot be a run directory (empty, a file, too
long) is refused before anything is created.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from convinit.errors import ConfigError
from convinit.runs.checkpoint import list_checkpoints, prune, verify_checkpoint
from convinit.runs.metrics import read_metrics

CONFIG_FILE = "config.yaml"  # the run's config as `train` saved it: what marks a folder as a run
RUN_FILES = (
    "metrics.jsonl",
    "metrics.csv",
    "track.jsonl",
    "provenance.json",
    "finished.json",
    "init_report.json",
    "failed.json",
    "threads.json",
    "preprocessing.json",
)


def check_run_dir_path(run_dir: Path) -> None:
    """ConfigError for a path that cannot be a run directory, before anything is created."""
    too_long = [part for part in run_dir.parts if len(part.encode()) > 255]
    if too_long:
        raise ConfigError(
            f"--out {run_dir}: the name {too_long[0][:40]}... is over 255 bytes; use a shorter one"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--out {run_dir} is a file, not a folder; name a folder for the run")


def holds_unfinished_run(run_dir: Path) -> bool:
    return (
        (run_dir / CONFIG_FILE).exists()
        or (run_dir / "metrics.jsonl").exists()
        or bool(list_checkpoints(run_dir))
    )


def stopped_before_first_step(run_dir: Path) -> bool:
    """A run with nothing to continue: no checkpoint (intact or damaged), no metrics row past step 0 and
    not finished. Its `--resume` would start over, so a new run may take its folder."""
    if (run_dir / "finished.json").exists() or list_checkpoints(run_dir):
        return False
    with warnings.catch_warnings():  # a cut last line is what a kill leaves; the rows are all we need
        warnings.simplefilter("ignore")
        rows = read_metrics(run_dir / "metrics.jsonl")
    return all(row.get("epoch") == 0 and not row.get("step") for row in rows)


def prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Make `run_dir` ready for a new run; refuse to mix it with a previous one (a run that stopped
    before its first step is no previous run: its files are replaced)."""
    if not overwrite and (run_dir / "finished.json").exists():
        raise ConfigError(f"{run_dir} already holds a finished run; choose another --out or pass --overwrite")
    overwrite = overwrite or stopped_before_first_step(run_dir)
    if not overwrite and holds_unfinished_run(run_dir):
        raise ConfigError(
            f"{run_dir} holds an unfinished run; continue it with `convinit train --resume {run_dir}` "
            "or pass --overwrite to start over"
        )
    if overwrite:
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        for record in run_dir.glob("threads-rank*.json"):  # the other ranks' thread records
            record.unlink()
        prune(run_dir, keep=0)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create run directory {run_dir} ({exc.strerror}); choose another --out"
        ) from exc
    if not os.access(run_dir, os.W_OK):
        raise ConfigError(f"run directory {run_dir} is not writable; choose another --out")


def refuse_if_all_damaged(run_dir: Path) -> None:
    """On --resume with no intact checkpoint: starting over is right only if none was ever written.

    Any folder named like a checkpoint counts, with its manifest or without: a write never publishes a
    folder under its final name before its manifest is complete, so one without is a damaged checkpoint
    (files deleted by hand, a partial copy), and starting over would silently discard its epochs.
    """
    damaged = [f"{p.name}: {verify_checkpoint(p) or 'unreadable'}" for p in list_checkpoints(run_dir)]
    if damaged:
        shown = "; ".join(damaged[:3]) + (f"; and {len(damaged) - 3} more" if len(damaged) > 3 else "")
        raise ConfigError(
            f"every checkpoint of {run_dir} is damaged ({shown}); restore one from a copy, or start "
            f"over with `convinit train --out {run_dir} --overwrite`"
        )
