"""Seconds of the closed-form impulse init of all of `vit_tiny_patch2_32`: without images (fitted on
the pseudo-input) and fitted on 64 real Fashion-MNIST images (32 px, 3 channels), real-pass report
included, for each thread count asked; median of `--repeats` runs after one warm-up, with the load
average (the machine may be shared: the figure is only as good as the quiet it ran in).

    python benchmarks/fit_time.py --threads 1 2 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from convinit.speed.costs import closed_form_impulse


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("threads | images | median s | runs (s) | real-pass mass fitted / held apart | load average")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for images in (0, 64):
            closed_form_impulse(images=images)  # warm-up: first calls, data read
            runs = [closed_form_impulse(images=images) for _ in range(args.repeats)]
            seconds = [run["seconds"] for run in runs]
            mass = "-" if not images else f"{runs[0]['real_pass_mass']:.3f} / {runs[0]['held_out_mass']:.3f}"
            each = ", ".join(f"{s:.2f}" for s in seconds)
            load = os.getloadavg()[0]
            print(
                f"{threads} | {images} | {statistics.median(seconds):.2f} | {each} | {mass} | {load:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
