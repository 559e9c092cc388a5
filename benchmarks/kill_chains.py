"""The long kill chains: runs and grids interrupted again and again, each ending bit-identical to the
same run never interrupted. Prints one line per chain and exits 1 on any mismatch.

    OMP_NUM_THREADS=1 python benchmarks/kill_chains.py [--kills 8] [--epochs 8] [--seed 0]

- `device`, `stream`: an 8-epoch run (digits, the tiny model of tests/reliability, every piece of state
  a resume restores: EMA, mixup, mimetic init, cosine schedule) killed `--kills` times at random points:
  before a random step or inside a random checkpoint write, with SIGKILL or SIGTERM; then resumed to the
  end. `stream` reads the same set through two DataLoader workers with timm's transforms.
- `eval`, `init`: SIGTERM then SIGKILL inside an evaluation, and inside impulse init's fit on images.
- `grid`: `convinit reproduce --jobs 2` of two rows, stopped with SIGTERM and killed with SIGKILL while
  its children train, then rerun to the end.

Every signal is sent at an event (a pause the process announces with a marker file), never after a
sleep; see tests/reliability/pausing_train.py.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from kill_chains import (  # noqa: E402  (the helpers live beside the tests that use them)
    INIT_FIT_OVERRIDES,
    STREAM_OVERRIDES,
    Interruption,
    run_chain,
    run_grid_chain,
)

SIGTERM, SIGKILL = signal.SIGTERM, signal.SIGKILL


def chains(args: argparse.Namespace, workdir: Path):
    epochs = f"epochs={args.epochs}"
    yield lambda: run_chain(workdir, "device", [epochs], kills=args.kills, seed=args.seed)
    yield lambda: run_chain(workdir, "stream", [epochs, *STREAM_OVERRIDES], kills=args.kills, seed=args.seed)
    in_eval = [
        Interruption(["--pause-in-eval", "3"], SIGTERM),
        Interruption(["--pause-in-eval", "1"], SIGKILL),
    ]
    yield lambda: run_chain(workdir, "eval", ["eval_every=1"], in_eval)
    in_init = [Interruption(["--pause-in-init"], SIGTERM), Interruption(["--pause-in-init"], SIGKILL)]
    yield lambda: run_chain(workdir, "init", INIT_FIT_OVERRIDES, in_init)
    grid = [
        Interruption(["--pause-at-step", "7"], SIGKILL),
        Interruption(["--pause-at-step", "5"], SIGTERM),
        Interruption(["--pause-at-step", "9"], SIGKILL),
    ]
    yield lambda: run_grid_chain(workdir, grid, epochs=4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=8, help="random kills per run chain")
    parser.add_argument("--epochs", type=int, default=8, help="epochs of the run chains (10 steps each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random kill points")
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="kill-chains-") as tmp:
        for chain in chains(args, Path(tmp)):
            tic = time.perf_counter()
            result = chain()
            verdict = "bit-identical" if result.identical else f"MISMATCH: {result.detail}"
            print(
                f"{result.name:14s} {len(result.stops)} stops, {verdict} ({time.perf_counter() - tic:.0f} s)"
            )
            for stop in result.stops:
                print(f"    {stop}")
            sys.stdout.flush()
            failures += not result.identical
    print("all chains end bit-identical" if not failures else f"{failures} chains differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
