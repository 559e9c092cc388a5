"""How many threads a run computes with: chosen once, from the settings and the machine, never from torch's
default, and said in one line beside the data path.

torch's default (one thread per physical core) is right for one process on an idle machine and badly wrong
otherwise: several grid runs, DataLoader workers, or other programs on the same cores make its threads wait
for each other at every parallel region: on a busy 2-core machine one step of the default preset took 8x
longer with 2 threads than with 1 (BENCHMARKS.md, "Threads on a busy machine"). The rule, first match wins:

1. `threads=N` in the config;
2. `OMP_NUM_THREADS` when the user set it;
3. on `--resume`, the count the run started with (recorded in `threads.json`), so that its floating-point
   sums are ordered as before and the resumed run is bit-identical (docs/reliability.md);
4. otherwise from the cores this process may use (its CPU affinity, capped by a cgroup CPU quota): all but
   one, which is left to everything else on the machine; in a `--jobs N` grid or under torchrun with
   `LOCAL_WORLD_SIZE` ranks on this machine an equal share, cores // (N x ranks); less one core per
   DataLoader worker (each worker computes with one thread, as torch sets it); at least 1.

Each rank chooses its own count, prints it and records it (`threads.json` for rank 0,
`threads-rank<R>.json` for the others), beside its decoding workers.

The same settings on the same machine give the same count; a resume that cannot use the recorded count
says it will not be bit-identical.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from convinit.config.train_config import MAX_THREADS
from convinit.data.cores import local_ranks, positive_int, usable_cores
from convinit.system.atomic import atomic_write_text
from convinit.system.read_back import read_capped, short_repr

CONCURRENT_RUNS_ENV = "CONVINIT_CONCURRENT_RUNS"  # a `--jobs N` grid sets N for its children
RECORD = "threads.json"


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count of this process and why."""

    threads: int
    reason: str

    def line(self) -> str:
        return f"threads: {self.threads} ({self.reason})"


def choose_threads(
    setting: int | None,
    workers: int = 0,
    recorded: int | None = None,
    env: Mapping[str, str] | None = None,
    cores: int | None = None,
) -> ThreadChoice:
    """The thread count for a run (see the module docstring for the rule)."""
    env = os.environ if env is None else env
    if setting is not None:
        return ThreadChoice(setting, f"threads={setting}")
    omp = positive_int(env.get("OMP_NUM_THREADS", "").split(",")[0] or None)  # "4,2": 4 at the outer level
    if omp is not None:
        changed = recorded is not None and recorded != omp
        unlike = f"; this run started with {recorded}: not bit-identical" if changed else ""
        return ThreadChoice(omp, f"OMP_NUM_THREADS={omp}{unlike}")
    if recorded is not None:
        return ThreadChoice(recorded, "as when this run started, for a bit-identical resume")
    cores = cores or usable_cores()
    runs, ranks = positive_int(env.get(CONCURRENT_RUNS_ENV)) or 1, local_ranks(env)
    if runs * ranks > 1:  # a grid or torchrun's ranks fill the machine by design: an equal share each
        sharing = [f"{runs} runs at once"] * (runs > 1) + [f"{ranks} local ranks"] * (ranks > 1)
        share, why = max(1, cores // (runs * ranks)), f"{cores} cores, {', '.join(sharing)}"
    elif cores > 1:  # one core left to everything else on the machine (the OS, other programs, the bar)
        share, why = cores - 1, f"{cores} cores, one left free"
    else:
        share, why = 1, "1 core"
    threads = max(1, share - workers)
    data = f", less {workers} data workers" if workers else ""
    return ThreadChoice(threads, f"{why}{data}; threads=N to change")


def record_path(run_dir: Path, rank: int = 0) -> Path:
    return run_dir / (RECORD if rank == 0 else f"threads-rank{rank}.json")


def read_recorded(run_dir: Path, rank: int = 0) -> int | None:
    """The thread count rank `rank` of `run_dir` started with (a rank that recorded nothing: the run's
    own); None for a run that recorded none, or (with a one-line warning naming the file and field)
    whose record is damaged."""
    path = record_path(run_dir, rank)
    if not path.exists():
        return None if rank == 0 else read_recorded(run_dir)
    try:
        threads = json.loads(read_capped(path))["threads"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # ConfigError is a ValueError
        threads = f"unreadable ({' '.join(str(exc).split())[:120]})"
    if isinstance(threads, int) and not isinstance(threads, bool) and 1 <= threads <= MAX_THREADS:
        return threads
    warnings.warn(
        f"{path}: field 'threads' must be an integer in 1..{MAX_THREADS}, got {short_repr(threads)}; "
        "the count is chosen afresh, so the resumed run may not be bit-identical",
        stacklevel=2,
    )
    return None


def record_threads(run_dir: Path, choice: ThreadChoice, rank: int = 0, workers: int = 0) -> None:
    """This rank's count and why, and its decoding workers, in its own file (ranks never share one)."""
    record = {"threads": choice.threads, "reason": choice.reason, "rank": rank, "workers": workers}
    atomic_write_text(record_path(run_dir, rank), json.dumps(record))


def set_run_threads(
    threads: int | None, run_dir: Path, resume: bool, workers: int = 0, rank: int = 0
) -> ThreadChoice:
    """Choose this run's thread count (`threads` is the config key) and set it for torch."""
    choice = choose_threads(threads, workers, read_recorded(run_dir, rank) if resume else None)
    torch.set_num_threads(choice.threads)
    return choice
