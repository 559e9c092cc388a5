"""Impulse init on ViT-Ti/2 at 32 px: the closed form against paper 1's optimiser recipe (docs/method.md §3).

Prints, never asserts. Targets for the closed form on `vit_tiny_patch2_32` (12 layers, 3 heads, 16 x 16
grid): under 2 s, mean target mass >= 0.9, argmax agreement >= 0.99. The optimiser recipe (Adam lr 1e-4,
renormalise every 100 steps, scale 0.1) runs on ONE layer for --steps steps, and the time to the paper's
10,000 steps is projected from it.

    python benchmarks/impulse_init.py                 # closed form (blend and x), 200 optimiser steps
    python benchmarks/impulse_init.py --steps 10000   # the full recipe on one layer (minutes)
"""

from __future__ import annotations

import argparse

import torch

from convinit import create_model, initialize
from convinit.speed.costs import optimizer_impulse


def closed_form_rows(kernel_size: int, offsets: str) -> list[tuple[str, dict]]:
    rows = []
    for label, kwargs in (("blend alpha 0 (fit on P)", dict(qk_input="blend", alpha=0.0)),
                          ("standard x (fit on LN(P))", dict(qk_input="x"))):  # fmt: skip
        torch.manual_seed(0)
        model = create_model("vit_tiny_patch2_32", **kwargs)
        report = initialize(model, "impulse", kernel_size=kernel_size, offsets=offsets, seed=0)
        rows.append((f"closed form, {label}", report))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200, help="optimiser steps on one layer (paper: 10000)")
    parser.add_argument("--lr", type=float, default=1e-4, help="optimiser learning rate (paper: 1e-4)")
    parser.add_argument("--scale", type=float, default=0.1, help="the fit's attention scale (paper: 0.1)")
    parser.add_argument("--kernel-size", type=int, default=3, help="impulse kernel size (follow-up: 3)")
    parser.add_argument("--offsets", default="centre_first", choices=["random", "centre_first"])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"vit_tiny_patch2_32: 12 layers x 3 heads, 16x16 grid; torch threads {torch.get_num_threads()}")
    print(f"{'method':48s} {'seconds':>9s} {'mass':>7s} {'argmax':>7s} {'mse':>9s} {'w scale':>8s}")
    for label, r in closed_form_rows(args.kernel_size, args.offsets):
        print(f"{label:48s} {r['seconds']:9.3f} {r['mean_mass']:7.3f} {r['mean_argmax_agreement']:7.3f} "
              f"{r['mean_mse']:9.2e} {r['mean_weight_scale']:8.2f}")  # fmt: skip
    row = optimizer_impulse(args.steps, args.lr, args.scale, args.kernel_size, args.offsets)
    label = f"optimiser, ONE layer, {args.steps} steps (lr {args.lr:g})"
    print(f"{label:48s} {row['seconds']:9.3f} {row['mean_mass']:7.3f} {row['argmax_agreement']:7.3f} "
          f"{row['mse']:9.2e}")  # fmt: skip
    per_layer = row["projected_paper_seconds_per_layer"]
    print(f"optimiser projected to 10,000 steps: {per_layer:.0f} s per layer, "
          f"{12 * per_layer / 60:.1f} min for 12 layers")  # fmt: skip
    print("targets for the closed form: < 2 s, mass >= 0.9, argmax agreement >= 0.99")


if __name__ == "__main__":
    main()
