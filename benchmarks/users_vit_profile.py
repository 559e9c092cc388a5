"""Where a training step's time goes, per model of the users' regime (docs/speed.md quotes the output).

Each row of `convinit.speed.users_vit` is built as `convinit train` builds it and trained through the
trainer's step (`train.trainer.train_step`) on batches from its own loader, under `torch.profiler`, one
thread. Every op's time goes to one group:

- attention: what runs inside a block's `attn` module (timm's, GPSA, the blend), forward, and the
  backward nodes of those ops (matched by autograd's sequence number); for ConvMixer the depthwise
  (token-mixing) convolutions;
- MLP: the same for `mlp` modules; for ConvMixer the pointwise (channel-mixing) convolutions;
- norms/elementwise: LayerNorm and BatchNorm modules outside those, and ConvMixer's GELUs;
- optimiser: the fused AdamW step and zero_grad (torch labels them);
- data: the next batch from the device loader and the step's augmentation module;
- trackers: the grid's trackers (non-locality, gates, init quality) timed once on 256 test images and
  spread over the steps of a run (they run at its end: `track_every: 0`);
- other: the rest of the step (patch embedding, position table, head, loss, gradient clipping, schedule,
  the device-side totals, residual adds between modules).

    python benchmarks/users_vit_profile.py              # ~2 min on one core
    python benchmarks/users_vit_profile.py --rows "users' ViT" --steps 10
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
import torch.nn as nn
from torch.autograd.profiler import record_function

from convinit.speed.users_vit import ROWS, build_step, row_config

GROUPS = ("attention", "MLP", "norms/elementwise", "optimiser", "data", "trackers", "other")
NORMS = (nn.LayerNorm, nn.BatchNorm2d, nn.GELU)


def group_of(name: str, module: nn.Module) -> str | None:
    """The group a module's forward counts to, or None (its ops count to an enclosing group, or other)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "attn" or (isinstance(module, nn.Conv2d) and module.groups > 1):
        return "attention"
    if leaf == "mlp" or (isinstance(module, nn.Conv2d) and module.kernel_size == (1, 1)):
        return "MLP"
    if isinstance(module, NORMS):
        return "norms/elementwise"
    return None


def label_forwards(model: nn.Module) -> list:
    """A profiler range `group::NAME` around each grouped module's forward (the outermost one wins)."""
    handles, depth = [], {"open": 0}
    for name, module in model.named_modules():
        group = group_of(name, module)
        if group is None:
            continue
        stack = []

        def enter(module, args, group=group, stack=stack):
            depth["open"] += 1
            if depth["open"] == 1:
                stack.append(record_function(f"group::{group}").__enter__())
            else:
                stack.append(None)

        def leave(module, args, output, stack=stack):
            depth["open"] -= 1
            scope = stack.pop()
            if scope is not None:
                scope.__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


def descendants(event):
    for child in event.cpu_children:
        yield child
        yield from descendants(child)


def grouped(events, steps: int) -> dict[str, float]:
    """Milliseconds per step of each group, from the profiler's events."""
    by_sequence: dict[int, str] = {}
    ms: dict[str, float] = defaultdict(float)
    for event in events:
        if event.name.startswith("group::"):
            group = event.name.removeprefix("group::")
            ms[group] += event.cpu_time_total / 1e3
            for child in descendants(event):
                if child.sequence_nr >= 0:
                    by_sequence.setdefault(child.sequence_nr, group)
        elif event.name.startswith("Optimizer."):
            ms["optimiser"] += event.cpu_time_total / 1e3
        elif event.name == "data":
            ms["data"] += event.cpu_time_total / 1e3
    for event in events:
        if event.name.startswith("autograd::engine::evaluate_function") and event.sequence_nr in by_sequence:
            ms[by_sequence[event.sequence_nr]] += event.cpu_time_total / 1e3
    return {group: value / steps for group, value in ms.items()}


def tracker_ms_per_step(label: str, step) -> float:
    """The grid's trackers once on 256 test images, over the steps of one run of the grid."""
    from convinit.experiments.grid import load_experiment
    from convinit.train.trainer import run_trackers

    grid = load_experiment("users-vit-end")
    row = next(r for r in grid["rows"] if r["label"] == ROWS[label].grid_row) if ROWS[label].grid_row else {}
    names = row.get("overrides", {}).get("track", grid["scales"]["small"]["overrides"]["track"])
    if not names:
        return 0.0
    model = step.parts.model
    images = torch.randn(256, *step.shape)
    start = time.perf_counter()
    run_trackers(model, names, images)
    seconds = time.perf_counter() - start
    model.train()
    steps_per_run = step.cfg.epochs * (step.cfg.per_class * 10 // step.cfg.batch_size)
    return 1e3 * seconds / steps_per_run


def profile_row(label: str, steps: int, batch: int) -> dict[str, float]:
    from convinit.train.opening import open_data
    from convinit.train.plan import resolve_plan

    cfg = row_config(ROWS[label], "7x7", batch, compile=False)
    step = build_step(cfg)
    loader = open_data(resolve_plan(cfg, torch.device("cpu"))).train
    batches = iter(loader)

    def one() -> None:
        nonlocal batches
        with record_function("data"):
            try:
                step.images, step.labels = next(batches)
            except StopIteration:
                batches = iter(loader)
                step.images, step.labels = next(batches)
        step()

    for _ in range(2):
        one()
    handles = label_forwards(step.parts.model)
    augment = step.parts.augment
    data_hooks = [
        augment.register_forward_pre_hook(lambda m, a: m.__dict__.setdefault("_s", []).append(
            record_function("data").__enter__())),
        augment.register_forward_hook(lambda m, a, o: m.__dict__["_s"].pop().__exit__(None, None, None)),
    ]  # fmt: skip
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            one()
        total = 1e3 * (time.perf_counter() - start) / steps
    for handle in handles + data_hooks:
        handle.remove()
    ms = grouped(prof.events(), steps)
    ms["trackers"] = tracker_ms_per_step(label, step)
    ms["other"] = max(total - sum(ms.get(g, 0.0) for g in GROUPS if g not in ("other", "trackers")), 0.0)
    ms["total"] = total + ms["trackers"]
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), metavar="ROW")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vit-ti-batch-size", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.steps} profiled steps after 2; ms per step (share)\n")
    print("| model | batch | step ms | " + " | ".join(GROUPS) + " |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in GROUPS) + " |")
    for label in args.rows:
        batch = args.vit_ti_batch_size if ROWS[label].twin == "ViT-Ti/2" else args.batch_size
        ms = profile_row(label, args.steps, batch)
        cells = [f"{ms.get(g, 0.0):.1f} ({100 * ms.get(g, 0.0) / ms['total']:.0f} %)" for g in GROUPS]
        print(f"| {label} | {batch} | {ms['total']:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
