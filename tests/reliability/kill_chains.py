"""Chains of kills: a run or a grid interrupted again and again at chosen or random points, then
finished, must end bit-identical to the same run never interrupted. A helper module, not a test: the
tests in test_kill_chains.py run short chains, benchmarks/kill_chains.py the full ones.

Every interruption is synchronised on an event, never on time: the process is started paused at a
point (before the N-th step, inside the N-th checkpoint write, inside an evaluation, inside the init
fit; see pausing_train.py), the pause writes a marker file, and the signal is sent then.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from killable_runs import EXACT_OVERRIDES, assert_same_run, child_env, start_cli, wait_until

from convinit.runs.checkpoint import list_checkpoints
from convinit.runs.ownership import OWNER_LOCK

PAUSING_CHILDREN = Path(__file__).with_name("pausing_children")
STEPS_PER_EPOCH = 10  # EXACT_OVERRIDES: 1000 digits, batch_size 100
# The streamed path: the same run read by two DataLoader workers with timm's transforms (which take
# their crops from resized_crop_scale, not crop_padding).
STREAM_OVERRIDES = ["data_mode=stream", "workers=2", "crop_padding=0", "resized_crop_scale=0.5"]
# Impulse init fits its filters on real training images: a signal can arrive in the middle of that.
INIT_FIT_OVERRIDES = ["model_args.qk_input=blend", "model_args.alpha=0.1", "init=impulse"]


def train_args(run_dir: Path, overrides: list[str], resume: bool) -> list[str]:
    if resume:
        return ["train", "--resume", str(run_dir), "--no-progress"]
    return ["train", *EXACT_OVERRIDES, *overrides, "--out", str(run_dir), "--no-progress"]


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "convinit", *args]
    return subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=1800)


def steps_done(run_dir: Path) -> int:
    """Steps the newest checkpoint holds (0 without one)."""
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        return 0
    name = checkpoints[-1].name.split("-")  # epoch-NNNN[-step-MMMMMM]
    return int(name[1]) * STEPS_PER_EPOCH + (int(name[3]) if len(name) > 3 else 0)


@dataclass
class Interruption:
    """One stop of a chain: where the process is paused and what it is sent there."""

    pause: list[str]  # pausing_train.py options
    signum: int

    def describe(self) -> str:
        return f"{signal.Signals(self.signum).name} at {' '.join(self.pause)}"


def interrupt(run_dir: Path, overrides: list[str], stop: Interruption, resume: bool, marker: Path) -> str:
    """Start the run (or its resume) paused at `stop.pause`, send `stop.signum` there; what it did."""
    marker.unlink(missing_ok=True)
    process = start_cli(
        train_args(run_dir, overrides, resume), wrapper=[*stop.pause, "--marker", str(marker)]
    )
    wait_until(marker.exists, process, stop.describe())
    process.send_signal(stop.signum)
    out, err = process.communicate(timeout=1800)
    expected = -signal.SIGKILL if stop.signum == signal.SIGKILL else 128 + stop.signum
    if process.returncode != expected:
        raise AssertionError(f"{stop.describe()}: exit {process.returncode}, expected {expected}\n{err}")
    if stop.signum != signal.SIGKILL and "stopped:" not in out:
        raise AssertionError(f"{stop.describe()}: no stopped: line\n{out}")
    return stop.describe()


def random_interruption(rng: random.Random, run_dir: Path, total_steps: int) -> Interruption:
    """A kill at a random point of what is left: before a random step, or inside a checkpoint write,
    with SIGKILL or SIGTERM."""
    left = total_steps - steps_done(run_dir)
    kind = rng.choice(["step", "step", "save"])
    signum = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
    if kind == "save" and left > STEPS_PER_EPOCH:  # a write that will happen: an epoch end still ahead
        epochs_left = (left - 1) // STEPS_PER_EPOCH
        return Interruption(["--pause-in-save", str(rng.randint(1, epochs_left))], signal.SIGKILL)
    return Interruption(["--pause-at-step", str(rng.randint(1, max(left - 1, 1)))], signum)


@dataclass
class ChainResult:
    name: str
    stops: list[str] = field(default_factory=list)
    identical: bool = False
    detail: str = ""


def run_chain(
    workdir: Path,
    name: str,
    overrides: list[str],
    stops: list[Interruption] | None = None,
    kills: int = 8,
    seed: int = 0,
) -> ChainResult:
    """The run interrupted at `stops` (or `kills` random points), resumed to the end, compared with the
    uninterrupted run; a mismatch is reported in the result, not raised."""
    reference, run_dir, marker = workdir / f"{name}-reference", workdir / name, workdir / f"{name}.paused"
    done = run_cli(train_args(reference, overrides, resume=False))
    if done.returncode != 0:
        raise AssertionError(f"the reference run failed:\n{done.stderr}")
    total = int(next(a for a in EXACT_OVERRIDES + overrides if a.startswith("epochs=")).split("=")[1])
    total *= STEPS_PER_EPOCH
    result, rng = ChainResult(name), random.Random(seed)
    plan = list(stops) if stops is not None else [None] * kills
    for i, planned in enumerate(plan):
        stop = planned or random_interruption(rng, run_dir, total)
        resume = i > 0 and (run_dir / "config.yaml").is_file()
        result.stops.append(interrupt(run_dir, overrides, stop, resume, marker))
    done = run_cli(train_args(run_dir, overrides, resume=True))
    if done.returncode != 0:
        result.detail = f"the final resume failed: {done.stderr.strip().splitlines()[-1:]}"
        return result
    try:
        assert_same_run(run_dir, reference)
        result.identical = True
    except AssertionError as exc:
        result.detail = str(exc)
    return result


# A grid of two rows of the tiny exact run (3 epochs), as a --jobs 2 grid runs them.
GRID_EXPERIMENT = """description: two rows of a tiny run, for kill chains
seeds: [0]
scales:
  small: {preset: default, overrides: {OVERRIDES}}
rows:
- {label: random, overrides: {init: random}}
- {label: mimetic, overrides: {init: mimetic}}
"""


def grid_experiment(workdir: Path, epochs: int) -> Path:
    pairs = [
        item.split("=", 1) for item in [*EXACT_OVERRIDES, f"epochs={epochs}"] if not item.startswith("init=")
    ]
    overrides = ", ".join(f"{key}: {value}" for key, value in dict(pairs).items())
    path = workdir / "two-rows.yaml"
    path.write_text(GRID_EXPERIMENT.replace("{OVERRIDES}", "{" + overrides + "}"))
    return path


def start_grid(experiment: Path, out: Path, pause: list[str], markers: Path) -> subprocess.Popen:
    """`convinit reproduce EXPERIMENT --jobs 2`, whose children pause at `pause` (marker per child)."""
    markers.mkdir(parents=True, exist_ok=True)
    env = {
        **child_env(),
        "PYTHONPATH": os.pathsep.join([str(PAUSING_CHILDREN), os.environ.get("PYTHONPATH", "")]),
        "PAUSING_CHILDREN": " ".join(pause),
        "PAUSING_CHILDREN_MARKERS": str(markers),
    }
    command = [
        sys.executable,
        "-m",
        "convinit",
        "reproduce",
        str(experiment),
        "--jobs",
        "2",
        "--out",
        str(out),
    ]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.Popen([*command, "--no-progress"], env=env, **pipes)


def released(run_dir: Path) -> bool:
    """True once no process holds the run directory (its owner lock is free)."""
    try:
        fd = os.open(run_dir / OWNER_LOCK, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def interrupt_grid(experiment: Path, out: Path, rows: list[Path], stop: Interruption, markers: Path) -> str:
    """Start the grid with both children paused at `stop.pause`, send `stop.signum` to the grid there,
    and wait until both children have let go of their rows."""
    for old in markers.glob("*") if markers.is_dir() else []:
        old.unlink()
    process = start_grid(experiment, out, stop.pause, markers)
    wait_until(
        lambda: len(list(markers.glob("*"))) >= len(rows), process, f"both grid children at {stop.pause}"
    )
    process.send_signal(stop.signum)
    out_text, err = process.communicate(timeout=1800)
    if stop.signum == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL, err
    else:
        expected = 128 + stop.signum
        if process.returncode != expected or "stopped: the grid" not in out_text:
            raise AssertionError(f"grid {stop.describe()}: exit {process.returncode}\n{out_text}\n{err}")
    for row in rows:  # a killed grid's children stop on their own (SIGTERM from the kernel)
        wait_until(lambda row=row: released(row), None, f"{row} to be released")
    return f"grid {stop.describe()}"


def run_grid_chain(workdir: Path, stops: list[Interruption], epochs: int = 3) -> ChainResult:
    """A --jobs 2 grid interrupted at `stops`, rerun to the end, each row compared with the same grid
    run without interruption."""
    experiment = grid_experiment(workdir, epochs)
    reference, out = workdir / "grid-reference", workdir / "grid"
    done = run_cli(["reproduce", str(experiment), "--jobs", "2", "--out", str(reference), "--no-progress"])
    if done.returncode != 0:
        raise AssertionError(f"the reference grid failed:\n{done.stderr}")
    rows = [out / "random" / "seed0", out / "mimetic" / "seed0"]
    result = ChainResult("grid --jobs 2")
    for stop in stops:
        result.stops.append(interrupt_grid(experiment, out, rows, stop, workdir / "markers"))
    step_checkpoints = [c.name for row in rows for c in list_checkpoints(row) if "-step-" in c.name]
    done = run_cli(["reproduce", str(experiment), "--jobs", "2", "--out", str(out), "--no-progress"])
    if done.returncode != 0:
        result.detail = f"the final rerun failed: {done.stdout}\n{done.stderr}"
        return result
    if not step_checkpoints:
        result.detail = "no row wrote a step checkpoint when its grid was stopped"
        return result
    try:
        for row in rows:
            assert_same_run(row, reference / row.relative_to(out))
        result.identical = True
    except AssertionError as exc:
        result.detail = str(exc)
    return result
