"""Wall-clock time of `convinit demo --quick` on one CPU core, quiet or beside a busy machine.

The demo runs as a fresh process (what a user types), pinned to one core with one torch thread. With
`--busy`, every other core of the machine runs a float32 matmul loop for the whole demo (a machine that is
doing other work: shared caches and memory bandwidth, the demo's core its own); `--shared` runs one such
loop on the demo's own core as well, so the demo gets about half of it. Prints the wall clock, the CPU
time the demo got, each model's training seconds (from the report's results.csv) and what the rest cost
(evaluation, figures, building the runs, imports).

Run: `python benchmarks/demo_time.py [--busy | --shared] [--out DIR]`. Linux only (CPU affinity).
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def spin(core: int, stop: multiprocessing.synchronize.Event) -> None:
    """A matmul loop on one core until `stop` is set: the other work of a busy machine."""
    os.sched_setaffinity(0, {core})
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    while not stop.is_set():
        a = torch.tanh(a @ a)


def run_demo(core: int, out: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of `convinit demo --quick` pinned to `core`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "convinit", "demo", "--quick", "--out", str(out), "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.run(
        argv, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {core}), stdout=subprocess.DEVNULL
    ).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--busy", action="store_true", help="a matmul loop on every other core")
    load.add_argument("--shared", action="store_true", help="--busy, and one loop on the demo's core too")
    parser.add_argument("--out", type=Path, help="the demo's folder (default: a new temporary one)")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    core, others = cores[0], cores[1:]
    spinning = others + [core] if args.shared else others if args.busy else []
    stop = multiprocessing.Event()
    loops = [multiprocessing.Process(target=spin, args=(c, stop), daemon=True) for c in spinning]
    for loop in loops:
        loop.start()
    out = args.out or Path(tempfile.mkdtemp(prefix="convinit-demo-")) / "demo"
    try:
        wall, cpu, code = run_demo(core, out)
    finally:
        stop.set()
        for loop in loops:
            loop.join()
    where = "shared core" if args.shared else "busy machine" if args.busy else "quiet machine"
    print(f"convinit demo --quick, one core ({where}: {len(spinning)} matmul loop(s) on {len(cores)} cores)")
    print(f"wall clock {wall:.1f} s, CPU time {cpu:.1f} s ({100 * cpu / wall:.0f} % of a core), exit {code}")
    if code:
        return code
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    training = sum(float(row["seconds"]) for row in rows)
    for row in rows:
        print(f"  {row['method']:42s} training {float(row['seconds']):6.1f} s")
    print(
        f"  {'training, all models':42s} {training:6.1f} s ({100 * training / wall:.0f} % of the wall clock)"
    )
    rest = wall - training
    print(f"  {'the rest (evaluation, figures, build)':42s} {rest:6.1f} s ({100 * rest / wall:.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
