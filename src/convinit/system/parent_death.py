"""Processes that must not outlive the one that started them (Linux's PR_SET_PDEATHSIG).

A grid's `convinit train` children and a streamed run's DataLoader workers call `die_with_parent` as
their first step: the kernel signals them the moment their parent dies, however it dies (a SIGKILL
runs no cleanup), instead of leaving them to notice seconds later or never.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when `parent` dies (no-op where prctl is missing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup still stops its children
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def die_with_worker_parent(parent: int, worker_id: int) -> None:
    """A DataLoader `worker_init_fn` (bound to the trainer's PID with functools.partial): the worker is
    killed with its trainer; it holds nothing that needs a clean exit."""
    die_with_parent(parent, signal.SIGKILL)
