"""Run the `convinit` command with a pause at a chosen point, so a test can kill it exactly there.

A test helper, not a test. The product code has no test hooks: this script patches it from outside
and then calls `convinit.cli.main`, as `python -m convinit` does.

    python pausing_train.py [--pause-at-step N | --pause-in-save N | --pause-in-eval N | --pause-in-init]
        [--marker FILE] [--rss-log FILE] -- train KEY=VALUE ... --out RUN_DIR

--pause-at-step N   before the N-th training step this process takes (1-based), i.e. mid-epoch
--pause-in-save N   inside the N-th checkpoint write of this process, with model.safetensors half
                    written in the `.tmp` folder (what a kill during the write leaves behind)
--pause-in-eval N   inside the N-th evaluation of the test set this process runs (mid-evaluation)
--pause-in-init     inside the initialisation (before the init scheme fits and measures on images)
--marker FILE       created when the pause is reached; the script then waits for a signal
--rss-log FILE      one line `epoch VmRSS_kB` after each epoch's metrics row (the soak test)

At the pause the process waits in `signal.pause()`: SIGKILL ends it there; any other signal is
handled as usual and the run continues (the trainer's SIGTERM handler then stops it at the next
step boundary).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from convinit import cli
from convinit.data import MixupCutmix
from convinit.runs import checkpoint as checkpoint_module
from convinit.runs.metrics import MetricsLog


def pause(marker: Path | None) -> None:
    if marker is not None:
        marker.write_text(str(os.getpid()))
    signal.pause()  # returns after a handled signal; SIGKILL never returns


def pause_at_step(n: int, marker: Path | None) -> None:
    original = MixupCutmix.__call__
    calls = {"n": 0}

    def counting_call(self, images, labels):
        calls["n"] += 1  # the trainer calls mix once per step it trains
        if calls["n"] == n:
            pause(marker)
        return original(self, images, labels)

    MixupCutmix.__call__ = counting_call


def pause_in_save(n: int, marker: Path | None) -> None:
    original = checkpoint_module.save_model
    calls = {"n": 0}

    def half_written_save(model, filename, *args, **kwargs):
        original(model, filename, *args, **kwargs)
        if Path(filename).name != "model.safetensors":
            return
        calls["n"] += 1
        if calls["n"] == n:
            os.truncate(filename, os.path.getsize(filename) // 2)
            pause(marker)

    checkpoint_module.save_model = half_written_save


def pause_in_call(module, name: str, n: int, marker: Path | None) -> None:
    """Pause inside the n-th call of `module.name` (before it returns)."""
    original = getattr(module, name)
    calls = {"n": 0}

    def pausing_call(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            pause(marker)
        return original(*args, **kwargs)

    setattr(module, name, pausing_call)


def install(args: argparse.Namespace) -> None:
    """Apply the pauses `args` asks for (also used by pausing_children/sitecustomize.py)."""
    from convinit.train import run_builder as setup
    from convinit.train import trainer

    if args.pause_at_step:
        pause_at_step(args.pause_at_step, args.marker)
    if args.pause_in_save:
        pause_in_save(args.pause_in_save, args.marker)
    if args.pause_in_eval:
        pause_in_call(trainer, "evaluate", args.pause_in_eval, args.marker)
    if args.pause_in_init:
        pause_in_call(setup, "initialize_model", 1, args.marker)
    if args.rss_log:
        log_rss(args.rss_log)


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser()
    options.add_argument("--pause-at-step", type=int)
    options.add_argument("--pause-in-save", type=int)
    options.add_argument("--pause-in-eval", type=int)
    options.add_argument("--pause-in-init", action="store_true")
    options.add_argument("--marker", type=Path)
    options.add_argument("--rss-log", type=Path)
    options.add_argument("cli_args", nargs=argparse.REMAINDER)
    return options


def log_rss(path: Path) -> None:
    original = MetricsLog.append

    def append_and_log(self, row):
        original(self, row)
        status = Path("/proc/self/status").read_text()
        rss_kb = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
        with open(path, "a") as f:
            f.write(f"{row['epoch']} {rss_kb}\n")

    MetricsLog.append = append_and_log


def main() -> int:
    args = parser().parse_args()
    install(args)
    cli_args = args.cli_args[1:] if args.cli_args[:1] == ["--"] else args.cli_args
    return cli.main(cli_args)


if __name__ == "__main__":
    sys.exit(main())
