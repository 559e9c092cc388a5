"""The CPU cores this process may use, and its share of them when several ranks of one run (torchrun's
local ranks) or several runs share the machine: what the decoding workers (`data/source.py`) and the
compute threads (`train/process.py`) are both sized from, so that 8 ranks on 16 cores do not each start
16 workers and 15 threads."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
LOCAL_RANKS_ENV = "LOCAL_WORLD_SIZE"  # torchrun: the processes of this run on this machine


def positive_int(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 1 else None


def cgroup_cores(path: Path = CGROUP_CPU_MAX) -> int | None:
    """Cores a cgroup CPU quota allows (a container run with `--cpus 2`), rounded up; None: no quota."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, -(-int(quota) // int(period)))


def usable_cores() -> int:
    """CPUs this process may run on: its affinity (taskset, SLURM's cpus-per-task), capped by a CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cores()
    return max(1, min(cores, quota) if quota else cores)


def local_ranks(env: Mapping[str, str] | None = None) -> int:
    """Ranks of this run on this machine (`LOCAL_WORLD_SIZE`, which torchrun sets); 1 outside torchrun."""
    env = os.environ if env is None else env
    return positive_int(env.get(LOCAL_RANKS_ENV)) or 1


def decoding_workers(requested: int, env: Mapping[str, str] | None = None, cores: int | None = None) -> int:
    """DataLoader workers for this rank: `workers`, capped at the rank's share of the cores (at least one
    when any is asked for)."""
    if requested <= 0:
        return 0
    share = max(1, (cores or usable_cores()) // local_ranks(env))
    return min(requested, share)
