"""Training images/s of impulse against random init on a CPU, with subnormal floats flushed and not.

Prints a table, never asserts. Four arms, each its own run built once from the same seed: random and
impulse init, each with flushing off and on (`convinit.system.denormals`, in every intra-op thread). The
arms alternate within each round, so that a change of the machine's load falls on every arm alike; each
figure is the median over rounds, and the ratios compare arms of the same rounds. Every arm keeps
training from where its last round stopped (its attention as peaked as training has left it). Then
`kernel_times`: whether this CPU pays for subnormal operands at all.

The setting is a 28 px image at 2 px patches (a 14 x 14 grid, 196 tokens): the default preset's ViT with
paper 1's blended Q/K input (alpha 0.1), on digits upsampled to 28 px.

    python benchmarks/denormals.py                         # 3 rounds of 10 steps per arm
    python benchmarks/denormals.py --rounds 5 --steps 20 threads=2
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from threads import endless  # benchmarks/threads.py: the same endless batches

from convinit.config import resolve_config
from convinit.system.denormals import flushes_in_every_thread, set_flush_denormal_everywhere
from convinit.train.plan import resolve_plan
from convinit.train.process import DistributedContext
from convinit.train.run_builder import build_run
from convinit.train.trainer import train_step

SETTING = [
    "dataset=digits",
    "img_size=28",
    "model_args.patch_size=2",
    "model_args.qk_input=blend",
    "model_args.alpha=0.1",
    "batch_size=64",
    "device=cpu",
]


def images_per_second(run, batches, steps: int, flush: bool) -> float:
    set_flush_denormal_everywhere(flush)
    seen, tic = 0, time.perf_counter()
    for index in range(steps):
        images, labels = next(batches)
        train_step(run.parts, run.state.totals, images, labels, index)
        seen += len(labels)
    run.state.totals.read()
    seconds = time.perf_counter() - tic
    set_flush_denormal_everywhere(False)
    return seen / seconds


def milliseconds(action, repeats: int = 5) -> float:
    action()
    tic = time.perf_counter()
    for _ in range(repeats):
        action()
    return (time.perf_counter() - tic) / repeats * 1e3


def kernel_times() -> None:
    """Whether this CPU pays for subnormal operands at all: an element-wise product of 4 M subnormal
    floats against 4 M normal ones, and SDPA's forward and backward at a 14 x 14 grid with logits scaled
    from ordinary (0.25) to peaked enough that most weights underflow (40), flushing off and on."""
    generator = torch.Generator().manual_seed(0)
    normal, tiny = torch.full((1 << 22,), 1e-30), torch.full((1 << 22,), 1e-39)
    q, k, v = (torch.randn(64, 4, 196, 16, generator=generator) for _ in range(3))

    def attention(scale: float) -> None:
        query = q.clone().requires_grad_()
        torch.nn.functional.scaled_dot_product_attention(query, k, v, scale=scale).sum().backward()

    actions = (lambda: normal * 0.5, lambda: tiny * 0.5, lambda: attention(0.25), lambda: attention(40.0))
    times: dict[bool, list[list[float]]] = {False: [], True: []}
    for round_index in range(5):  # alternating, each setting first in turn; medians
        for flush in (False, True) if round_index % 2 == 0 else (True, False):
            set_flush_denormal_everywhere(flush)
            times[flush].append([milliseconds(action, 2) for action in actions])
    set_flush_denormal_everywhere(False)
    columns = ("x * 0.5, normal", "x * 0.5, subnormal", "SDPA fwd+bwd, scale 0.25", "scale 40")
    print("flush  " + "  ".join(f"{c:>24}" for c in columns) + "   (ms, median of 5)")
    for flush, rounds in times.items():
        medians = [statistics.median(column) for column in zip(*rounds, strict=True)]
        print(f"{'on' if flush else 'off':>5}  " + "  ".join(f"{t:24.1f}" for t in medians))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per round and arm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="key=value config overrides (after the setting)")
    args = parser.parse_args()
    arms = [(init, flush) for init in ("random", "impulse") for flush in (False, True)]
    rates: dict[tuple[str, bool], list[float]] = {arm: [] for arm in arms}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        runs, batches = {}, {}
        for init, flush in arms:
            cfg = resolve_config("default", [*SETTING, f"init={init}", *args.overrides])
            name = f"{init}-{'on' if flush else 'off'}"
            runs[init, flush] = build_run(
                resolve_plan(cfg), Path(tmp) / name, False, False, DistributedContext()
            )
            batches[init, flush] = endless(runs[init, flush].data.train)
        set_flush_denormal_everywhere(True)
        every = flushes_in_every_thread()
        set_flush_denormal_everywhere(False)
        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} threads; flushing reaches every thread: "
            f"{every}; digits at 28 px, 2 px patches (196 tokens), batch 64"
        )
        for arm in arms:  # warm-up: first-call allocations
            images_per_second(runs[arm], batches[arm], 2, arm[1])
        for round_index in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for arm in arms[round_index % 4 :] + arms[: round_index % 4]:  # each arm first in turn
                rates[arm].append(images_per_second(runs[arm], batches[arm], args.steps, arm[1]))
    median = {arm: statistics.median(values) for arm, values in rates.items()}
    print(f"{'init':>8} {'flush':>6} {'img/s':>7} {'vs random, same flush':>22}   img/s per round")
    for init, flush in arms:
        ratio = median[init, flush] / median["random", flush]
        rounds = " ".join(f"{r:6.0f}" for r in rates[init, flush])
        print(f"{init:>8} {'on' if flush else 'off':>6} {median[init, flush]:7.0f} {ratio:21.2f}x   {rounds}")
    for init in ("random", "impulse"):
        print(f"{init}: flush on / off = {median[init, True] / median[init, False]:.2f}x")
    print(f"{'load':>37}   " + " ".join(f"{x:6.2f}" for x in loads) + "   (1-minute load average)")
    kernel_times()


if __name__ == "__main__":
    main()
