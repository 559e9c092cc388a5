"""Stopping at a step boundary: SIGINT/SIGTERM set a flag the loop checks after each step, and a
signal outside the loop (data loading, init) stops at once. Either way one `stopped:` line, printed once
the progress bar is closed, says how to continue: `convinit train --resume RUN_DIR`, or the command that
started the run when it is part of something larger (`continue_with`, e.g. the demo).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from convinit.runs.run_dir import CONFIG_FILE

CONTINUE_WITH: ContextVar[str | Callable[[], str] | None] = ContextVar("continue_with", default=None)


class RunInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT/SIGTERM after writing a checkpoint at a step boundary."""

    def __init__(self, signum: int, checkpoint: Path | None, in_loop: bool = True):
        super().__init__(f"stopped by signal {signum}; checkpoint {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint  # None in the loop: a DDP rank that is not the one that saves
        self.in_loop = in_loop


@contextmanager
def stop_at_step_boundary() -> Iterator[dict[str, int | None]]:
    """SIGINT/SIGTERM set a flag that the loop checks after each step; a second Ctrl-C stops at once."""
    flag: dict[str, int | None] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def request_stop(signum: int, frame: Any) -> None:
        flag["signum"] = signum
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def continue_with(command: str | Callable[[], str]) -> Iterator[None]:
    """Runs trained inside tell the user, when stopped, to rerun `command` (which resumes them), not to
    resume the inner run directory by hand. A callable gives the whole sentence when the stop comes (a
    SLURM job that requeues itself says so: there is nothing to rerun)."""
    token = CONTINUE_WITH.set(command)
    try:
        yield
    finally:
        CONTINUE_WITH.reset(token)


def how_to_continue(run_dir: str | Path | None) -> str:
    command = CONTINUE_WITH.get()
    if callable(command):
        return command()
    if command is not None:
        return f"rerun `{command}` to continue where it stopped"
    if run_dir is not None and (Path(run_dir) / CONFIG_FILE).is_file():
        return f"continue with `convinit train --resume {run_dir}`"
    return "run the same command again"


@contextmanager
def stop_outside_the_loop(run_dir: str | Path | None) -> Iterator[None]:
    """SIGINT/SIGTERM before the loop starts (data loading, init) or after it ends: stop at once; the
    files written so far are complete (atomic), so the run can be resumed. Prints the `stopped:` line of
    every stop, inside the loop too (after the progress bar has closed, so the line stands on its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop_now(signum: int, frame: Any) -> None:
        raise RunInterrupted(signum, None, in_loop=False)

    previous = {sig: signal.signal(sig, stop_now) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except RunInterrupted as exc:
        outside = f"by signal {exc.signum} outside the training loop, nothing lost"
        where = f"checkpoint {exc.checkpoint}" if exc.in_loop else outside
        if not exc.in_loop or exc.checkpoint is not None:
            print(f"stopped: {where}; {how_to_continue(run_dir)}")
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
