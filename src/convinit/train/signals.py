"""Stopping at a step boundary: SIGINT/SIGTERM set a flag the loop checks after each step, and a
signal outside the loop (data loading, init) stops at once with a `stopped:` line.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class RunInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT/SIGTERM after writing a checkpoint at a step boundary."""

    def __init__(self, signum: int, checkpoint: Path | None):
        super().__init__(f"stopped by signal {signum}; checkpoint {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint


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
def stop_outside_the_loop(run_dir: str | Path | None) -> Iterator[None]:
    """SIGINT/SIGTERM before the loop starts (data loading, init) or after it ends: stop at once with a
    `stopped:` line; the files written so far are complete (atomic), so the run can be resumed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop_now(signum: int, frame: Any) -> None:
        raise RunInterrupted(signum, None)

    previous = {sig: signal.signal(sig, stop_now) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except RunInterrupted as exc:
        if exc.checkpoint is None:
            again = (
                f"continue with `convinit train --resume {run_dir}`"
                if run_dir is not None and (Path(run_dir) / "config.yaml").is_file()
                else "run the same command again"
            )
            print(f"stopped: by signal {exc.signum} outside the training loop, nothing lost; {again}")
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
