"""Run a grid of training runs, resumably: finished runs are skipped, interrupted ones resumed.

Launchers: `local` runs one after another in this process, or `jobs` at once as subprocesses;
`slurm` submits one submitit job per run (partition, GPUs and time from the options).
Each run directory gets `experiment.json` (experiment, row label, seed, preset, paper number) beside
the trainer's own files, which is what `convinit report` reads.

A rerun first compares every existing run's saved config with the grid's: if any differ it stops and
names them, instead of skipping them and reporting old numbers. A run that fails (its loss diverges,
its child process dies) does not stop the others: it is reported as failed, with the reason, in
`failed.json` and the report; rerunning the grid tries it again. Subprocess runs die with the grid
(see `child_process`), so a rerun never races the children of a killed one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from convinit.config import TrainConfig, config_differences, load_config, save_config, say_notes
from convinit.errors import ConfigError, ConvinitError, DataError
from convinit.experiments.failures import record_failure
from convinit.experiments.grid import GridCell
from convinit.runs.checkpoint import latest_checkpoint
from convinit.runs.ownership import own_run_dir
from convinit.runs.provenance import provenance
from convinit.runs.run_dir import CONFIG_FILE
from convinit.runs.signals import RunInterrupted
from convinit.system import parent_death as lifetime
from convinit.system.atomic import atomic_write_text, make_folder
from convinit.train import train
from convinit.train.process import CONCURRENT_RUNS_ENV
from convinit.train.validation import validate

LAUNCHERS = ("local", "slurm")


def run_state(run_dir: Path) -> str:
    """'finished', 'partial' (resume it) or 'new'."""
    if (run_dir / "finished.json").exists():
        return "finished"
    return "partial" if (run_dir / CONFIG_FILE).exists() else "new"


def start_outcome(run_dir: Path) -> str:
    """What running `run_dir` will do: 'trained' from scratch, or 'resumed from <checkpoint>'."""
    checkpoint = latest_checkpoint(run_dir)
    return "trained" if checkpoint is None else f"resumed from {checkpoint.name}"


def write_experiment_record(spec: GridCell, run_dir: Path, out: Path) -> None:
    make_folder(run_dir, inside=out)  # a row's or a seed's folder inside the grid's is never a link
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
    atomic_write_text(run_dir / "experiment.json", json.dumps(record, indent=1))


def changed_runs(out: Path, planned: Iterable[tuple[str, TrainConfig]]) -> list[tuple[str, list[str]]]:
    """(folder, differing keys) of every existing run under `out` whose saved config differs from the
    config planned for it: a finished one would be skipped and reported as the planned run."""
    changed = []
    for dirname, cfg in planned:
        run_dir = out / dirname
        if run_state(run_dir) != "new":
            keys = config_differences(load_config(run_dir / CONFIG_FILE), cfg)
            if keys:
                changed.append((dirname, keys))
    return changed


def check_unchanged(runs: list[GridCell], out: Path) -> None:
    """ConfigError naming every existing run whose saved config differs from the grid's."""
    changed = [
        f"{dirname} ({', '.join(keys)})"
        for dirname, keys in changed_runs(out, [(spec.dirname, spec.config) for spec in runs])
    ]
    if changed:
        shown = "; ".join(changed[:5]) + (f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise ConfigError(
            f"{out} holds runs trained with other settings: {shown}; use another --out, "
            "or delete those run folders to rerun them with these settings"
        )


def check_rows_will_start(runs: list[GridCell], out: Path) -> None:
    """Every row with a run still to do passes `validate` (its keys, data and model on the meta device)
    before the grid trains anything: a row refused at its turn was refused after hours of the rows before
    it. One run per row; a student whose teacher is a run of this grid is checked without it (its teacher
    is checked when it starts)."""
    checked: set[str] = set()
    for spec in runs:
        if spec.label in checked or run_state(out / spec.dirname) == "finished":
            continue
        checked.add(spec.label)
        config = spec.config
        if teacher_in_grid(config.teacher, out):
            config = dataclasses.replace(config, teacher=None)
        try:
            validate(config)
        except (ConfigError, DataError) as error:
            raise type(error)(f"row {spec.label!r}: {error}; nothing of the grid has run") from None


def check_distinct(runs: list[GridCell]) -> None:
    seen: dict[str, str] = {}
    for spec in runs:
        if spec.dirname in seen:
            raise ConfigError(
                f"rows {seen[spec.dirname]!r} and {spec.label!r} (seed {spec.seed}) would share the folder "
                f"{spec.dirname}; give every row its own label"
            )
        seen[spec.dirname] = spec.label


def die_with_parent(parent: int) -> Callable[[], None]:
    """The child's pre-exec step (Linux): SIGTERM it when the parent dies, however the parent dies."""
    return functools.partial(lifetime.die_with_parent, parent, signal.SIGTERM)


def child_process(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """A child in its own session (the terminal's Ctrl-C reaches the grid, which stops it) that dies
    with its parent (PR_SET_PDEATHSIG), so no child outlives a killed grid."""
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent(os.getpid()),
    )


def subprocess_command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "convinit", "train", "--no-progress", "--resume", str(run_dir)]


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no message").removeprefix("convinit: error: ")[-300:]


class GridStop:
    """A grid stops like a run. SIGINT or SIGTERM to the grid forwards SIGTERM to its running children,
    which stop at their next step boundary with a checkpoint (exit 143); no further row is started; the
    grid then ends with a `stopped:` line and the signal's exit code. Rerunning it resumes every row."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.children: list[subprocess.Popen] = []
        self.lock = threading.RLock()  # a child is either started before the stop (and told) or never

    def start(self, launch: Callable[[], subprocess.Popen]) -> subprocess.Popen | None:
        with self.lock:
            if self.signum is not None:
                return None
            self.children.append(launch())
            return self.children[-1]

    def stop_children(self) -> None:
        with self.lock:
            for child in self.children:
                if child.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.send_signal(signal.SIGTERM)

    def request(self, signum: int, frame: Any) -> None:
        """The signal handler (main thread): remember the first signal, stop the children."""
        self.signum = self.signum or signum
        self.stop_children()

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.request) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stopped(self, outcome: dict[str, str], signum: int) -> RunInterrupted:
        """Print the grid's `stopped:` line; the exception that ends it with the signal's exit code."""
        halted = sum(what.startswith("stopped") for what in outcome.values())
        waiting = sum(what.startswith("not started") for what in outcome.values())
        print(
            f"stopped: the grid, by signal {signum} ({halted} running runs wrote a checkpoint, {waiting} not "
            "started); run the same command again to resume them"
        )
        return RunInterrupted(signum, None)


def run_in_subprocesses(todo: list[Path], jobs: int, stop: GridStop) -> dict[str, str]:
    """Run each directory as a `convinit train --resume` child, `jobs` at once; children are stopped
    (SIGTERM: a checkpoint at the next step boundary) if this process is interrupted."""
    env = {**os.environ, CONCURRENT_RUNS_ENV: str(jobs)}  # each child computes on its share of the cores

    def launch(run_dir: Path) -> tuple[str, str]:
        started = start_outcome(run_dir)
        child = stop.start(lambda: child_process(subprocess_command(run_dir), env))
        if child is None:
            return str(run_dir), "not started: the grid was stopped"
        _, err = child.communicate()
        if child.returncode == 0:
            return str(run_dir), started
        if child.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM, 128 + signal.SIGINT):
            return str(run_dir), "stopped: rerun the grid to resume it"
        return str(run_dir), record_failure(run_dir, last_line(err))

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        return dict(pool.map(launch, todo))
    except BaseException:
        stop.request(signal.SIGTERM, None)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_in_process(todo: list[Path], progress: bool, stop: GridStop) -> dict[str, str]:
    outcome = {}
    for run_dir in todo:
        if stop.signum is not None:  # a signal between two runs
            outcome[str(run_dir)] = "not started: the grid was stopped"
            continue
        started = start_outcome(run_dir)
        try:
            train(None, run_dir=run_dir, resume=True, progress=progress)
        except ConvinitError as exc:  # this row failed; the others still run
            outcome[str(run_dir)] = record_failure(run_dir, str(exc))
            continue
        except RunInterrupted as exc:  # it wrote a checkpoint and its own `stopped:` line
            stop.signum = exc.signum
            outcome[str(run_dir)] = "stopped: rerun the grid to resume it"
            continue
        outcome[str(run_dir)] = started
    return outcome


def bind_teacher(spec: GridCell, out: Path) -> GridCell:
    """A row's `teacher` may name another run of its grid: `{grid}` is the grid's folder and `{seed}` the
    run's seed (`teacher: "{grid}/convmixer-cnn/seed{seed}"`: each seed's student learns from the CNN of
    the same seed, the pairing DeiT compared against)."""
    teacher = spec.config.teacher
    if teacher is None or "{" not in teacher:
        return spec
    try:
        bound = teacher.format(grid=out, seed=spec.seed)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"row {spec.label!r}: teacher {teacher!r} may name only {{grid}} and {{seed}} ({exc})"
        ) from None
    return dataclasses.replace(spec, config=dataclasses.replace(spec.config, teacher=bound))


def waits_for_teacher(run_dir: Path, todo: list[Path]) -> bool:
    """Whether `run_dir` learns from a run of this grid that has still to run: it starts after them."""
    teacher = load_config(run_dir / CONFIG_FILE).teacher
    return teacher is not None and any(Path(teacher).resolve() == other.resolve() for other in todo)


def teacher_in_grid(teacher: str | None, out: Path) -> bool:
    """Whether `teacher` names a run of the grid in `out` (one it trains itself)."""
    return teacher is not None and Path(teacher).resolve().is_relative_to(Path(out).resolve())


def unfinished_teacher(run_dir: Path, out: Path, outcome: dict[str, str]) -> bool:
    """A run whose teacher is a run of this grid that has not finished (it failed, or was stopped) is not
    started: it would learn from a half-trained teacher. It is recorded as failed, to be tried again."""
    teacher = load_config(run_dir / CONFIG_FILE).teacher
    if teacher is None or not teacher_in_grid(teacher, out):
        return False
    if run_state(Path(teacher)) == "finished":
        return False
    outcome[str(run_dir)] = record_failure(run_dir, f"its teacher {teacher} has not finished; rerun the grid")
    return True


def run_grid(
    runs: Iterable[GridCell],
    out: Path,
    launcher: str = "local",
    jobs: int = 1,
    progress: bool = True,
    slurm_options: Any = None,
) -> dict[str, str]:
    """Run every spec into out/<row>/seed<k>; returns {run dir: what was done}.

    What was done: trained, resumed from <checkpoint>, skipped (finished before), failed: <reason>,
    or with SLURM (`slurm_options`: a `SlurmOptions` or its fields by name) submitted, queued or running
    <job id>. `out` is held (see `convinit.runs.ownership`) while the grid runs.
    """
    runs = [bind_teacher(spec, Path(out)) for spec in runs]
    check_distinct(runs)
    if launcher == "slurm":  # a request SLURM could not start is refused before any folder is made
        from convinit.experiments.launchers import as_options
        from convinit.experiments.slurm_options import check_request

        check_request(as_options(slurm_options))
    else:  # a SLURM job is checked on its node, whose devices the submitting machine may not have
        check_rows_will_start(runs, Path(out))
    with own_run_dir(Path(out)):
        check_unchanged(runs, out)
        say_notes()  # the grid is accepted: its configs' adapted defaults
        outcome: dict[str, str] = {}
        todo = []
        for spec in runs:
            run_dir = out / spec.dirname
            if run_state(run_dir) == "finished":
                outcome[str(run_dir)] = "skipped"
                continue
            if run_state(run_dir) == "new":  # write the config so every launcher can start with --resume
                write_experiment_record(spec, run_dir, Path(out))
                save_config(spec.config, run_dir / CONFIG_FILE)
            if launcher != "slurm":  # SLURM: a failed job's run is reported, see launch_on_slurm
                (run_dir / "failed.json").unlink(missing_ok=True)  # tried again
            todo.append(run_dir)
        if launcher == "slurm":
            from convinit.experiments.launchers import launch_on_slurm

            outcome.update(launch_on_slurm(todo, out, slurm_options))
            return outcome
        stop = GridStop()
        students = [run_dir for run_dir in todo if waits_for_teacher(run_dir, todo)]
        waves = [[run_dir for run_dir in todo if run_dir not in students], students]  # teachers first
        with stop.handling_signals():
            for wave in waves:
                wave = [run_dir for run_dir in wave if not unfinished_teacher(run_dir, out, outcome)]
                if jobs > 1:
                    outcome.update(run_in_subprocesses(wave, jobs, stop))
                else:
                    outcome.update(run_in_process(wave, progress, stop))
        if stop.signum is not None:
            raise stop.stopped(outcome, stop.signum)
        return outcome


def failed(outcome: dict[str, str]) -> list[str]:
    """The run directories of `outcome` that failed."""
    return [run_dir for run_dir, what in outcome.items() if what.startswith("failed")]


def nothing_trained(outcome: dict[str, str], out: Path) -> str | None:
    """The line a rerun prints when every run was finished before it (each one `skipped`): nothing was
    trained, and the way to train the rows again is another --out. None when something ran."""
    if not outcome or any(what != "skipped" for what in outcome.values()):
        return None
    return (
        f"every run of this grid in {out} was already finished ({len(outcome)} skipped): nothing was trained "
        f"and the report is of the runs found there; to train them again, pass another --out "
        f"(e.g. --out {out}-rerun)"
    )
