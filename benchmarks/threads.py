"""Seconds per training step of a preset at several thread counts, on this machine as it is now.

Prints a table, never asserts. The arms alternate (1, 2, ..., 1, 2, ...) so that a change of the
machine's load during the run falls on every arm alike; each figure is the median over rounds. Run it on
a busy machine to see oversubscription (torch's default, one thread per core, against fewer), on an idle
one to see what the threads buy.

    python benchmarks/threads.py                       # the default preset; 1 thread and torch's default
    python benchmarks/threads.py --threads 1 2 4 --steps 20 --rounds 5 epochs=1
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from convinit.config import resolve_config
from convinit.train.plan import resolve_plan
from convinit.train.process import DistributedContext, choose_threads
from convinit.train.run_builder import build_run
from convinit.train.trainer import train_step

TORCH_DEFAULT = torch.get_num_threads()  # before anything sets it


def endless(loader):
    """The loader's batches, epoch after epoch (a short epoch does not end a round)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def seconds_per_step(run, steps: int) -> float:
    batches = endless(run.data.train)
    tic = time.perf_counter()
    for index in range(steps):
        images, labels = next(batches)
        train_step(run.parts, run.state.totals, images, labels, index)
    run.state.totals.read()  # the device's queue drained
    return (time.perf_counter() - tic) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="default")
    parser.add_argument("--threads", type=int, nargs="*", help="counts to time (default: 1 and torch's)")
    parser.add_argument("--steps", type=int, default=10, help="steps per round and arm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args()
    counts = args.threads or sorted({1, TORCH_DEFAULT})
    cfg = resolve_config(args.preset, args.overrides)
    chosen = choose_threads(cfg.threads)
    print(f"torch's default: {TORCH_DEFAULT}; convinit chooses {chosen.line()}")
    with tempfile.TemporaryDirectory() as tmp:
        run = build_run(resolve_plan(cfg), Path(tmp) / "run", False, False, DistributedContext())
        torch.set_num_threads(counts[0])
        seconds_per_step(run, 2)  # warm-up: first-call allocations
        times: dict[int, list[float]] = {n: [] for n in counts}
        loads = []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for n in counts:
                torch.set_num_threads(n)
                times[n].append(seconds_per_step(run, args.steps))
    print(f"{'threads':>8} {'median':>8}   s/step per round")
    for n in counts:
        print(f"{n:>8} {statistics.median(times[n]):>8.3f}   " + " ".join(f"{t:6.3f}" for t in times[n]))
    print(f"{'load':>17}   " + " ".join(f"{x:6.2f}" for x in loads) + "   (1-minute load average)")


if __name__ == "__main__":
    main()
