"""Cost of `track=[init_quality]` per training step at its default interval (target: under 2 %).

For the paper-1 CPU models (the blend ViT of `paper1/table3_alpha_small` on digits, and on Fashion-MNIST
with 4 px patches), impulse-initialised on 64 real training images as the trainer does: the median time
of a training step (batch 64: forward, backward, AdamW step) and of one tracker call (on the trainer's
fixed batch of test images), then call / (track_every * step). Prints a table, never asserts; run it
single-threaded as training runs are (OMP_NUM_THREADS=1).

    python benchmarks/tracker_cost.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn

from convinit.analysis import get_tracker
from convinit.config import TrainConfig, resolve_config
from convinit.train.opening import init_images, initialize_model, open_data, open_model, source_shape
from convinit.train.plan import resolve_plan
from convinit.train.run_builder import TRACK_BATCH

MODELS = {
    "digits blend alpha 0.1 (8x8 grid)": [],
    "Fashion-MNIST blend alpha 0.1 (7x7 grid)": [
        "dataset=fashion-mnist",
        "per_class=100",
        "model_args.patch_size=4",
    ],
}


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return statistics.median(times)


def measure(cfg: TrainConfig, repeats: int) -> tuple[float, float]:
    """(seconds per training step, seconds per tracker call) for one config."""
    plan = resolve_plan(cfg, torch.device("cpu"))
    data = open_data(plan)  # the builder's steps (convinit.train.opening)
    model = open_model(plan, source_shape(data))
    model.init_report = initialize_model(plan.init, model, init_images(data))
    images, labels = next(iter(data.train))
    inputs = data.augment(images)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), labels).backward()
        optimizer.step()

    tracker = get_tracker("init_quality")
    track_images = data.test_batch(TRACK_BATCH, plan.device)
    step()  # warm-up
    tracker(model, track_images)
    return median_seconds(step, repeats * 4), median_seconds(lambda: tracker(model, track_images), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed tracker calls (4x as many steps)")
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"{'model':44s} {'step ms':>8s} {'call ms':>8s} {'every':>6s} {'cost/step':>10s}")
    for name, overrides in MODELS.items():
        cfg = resolve_config("paper1/table3_alpha_small", ["init=impulse", "device=cpu", *overrides])
        step, call = measure(cfg, args.repeats)
        every = TrainConfig.track_every
        print(
            f"{name:44s} {step * 1e3:8.1f} {call * 1e3:8.1f} {every:6d} {100 * call / (every * step):9.2f}%"
        )


if __name__ == "__main__":
    main()
