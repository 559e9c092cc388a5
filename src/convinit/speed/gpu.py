"""The Python stages of `benchmarks/gpu.sh`: `python -m convinit.speed.gpu STAGE --results FILE ...`.

Every figure is appended to one JSON-lines results file the moment it is measured (one object per line,
`{"stage": ..., ...}`), so a stage stopped by its time cap keeps what it had measured, and `summary`
prints the whole file as tables whatever failed. Stages:

- `audit`: the real training step of each recipe, with `torch.cuda.set_sync_debug_mode("warn")`: every
  synchronising CUDA call (a read, a blocking copy) is a warning, counted per step with its call site.
- `steps`: trainer-step images/s (`train.trainer.train_step`: augmentation, bf16 forward and backward, fused
  AdamW, totals) of ViT-Ti, ConViT-Ti and DeiT-Ti and timm's same models at 32 and 224 px, eager rows
  first, then compiled (`compile_mode=auto`), each as a fraction of the measured bf16 matmul rate and of
  the datasheet peak.
- `stream`: the streamed loader's images/s at each worker count.
- `ddp`: one NCCL (gloo on the CPU) rank training the real step under DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn as nn

# dense bf16 tensor-core peak from NVIDIA's datasheets (the sparsity figures are twice these)
DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100 80GB HBM3": 989.0, "A100": 312.0}

AUDIT_CASES: dict[str, tuple[str, list[str]]] = {
    "cifar crop/flip": ("paper1/recipe", ["crop_padding=4", "hflip=true"]),
    "deit mixup/cutmix/ema/clip": ("deit", ["model=deit_tiny", "ema_decay=0.99996", "clip_grad=1.0"]),
    "paper1 recipe_aug": ("paper1/recipe_aug", []),
    "convmixer batchnorm": (  # the small scale of the grid paper1-fig4
        "paper1/convmixer_small",
        [
            "model_args.spatial=impulse",
            "model_args.block=paper1",
            "model_args.filter_assignment=random",
            "ema_decay=0.999",
            "channels_last=true",
        ],
    ),
    "streamed": ("deit", ["model=deit_tiny", "data_mode=stream", "mixup=0", "cutmix=0"]),
    "streamed mixup/cutmix": ("deit", ["model=deit_tiny", "data_mode=stream"]),
}

# (convinit model, timm model, timm arguments) per family; sizes set img_size and patch_size
STEP_MODELS = {
    "ViT-Ti": ("vit_tiny_patch2_32", "vit_tiny_patch16_224",
               {"class_token": False, "global_pool": "avg", "qkv_bias": False}),
    "ConViT-Ti": ("convit_tiny", "convit_tiny", {}),
    "DeiT-Ti": ("deit_tiny", "deit_tiny_patch16_224", {}),
}  # fmt: skip
PATCH = {32: 2, 224: 16}


def record(results: Path, stage: str, **fields: Any) -> None:
    """Append one figure to the results file at once (a stage cut by its cap keeps what it wrote)."""
    with open(results, "a") as file:
        file.write(json.dumps({"stage": stage, **fields}, default=str) + "\n")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_port() -> int:
    """A port no other process holds now: a fixed one collides with a second run on the same machine."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_config(preset: str, overrides: list[str], data: dict[str, str]):
    """(config, data source, step parts) of a run built as `convinit train` builds it."""
    from convinit.config import resolve_config
    from convinit.train.opening import open_data, open_model, source_shape
    from convinit.train.plan import resolve_plan
    from convinit.train.process import DistributedContext, configure_cuda_math
    from convinit.train.step_parts import step_parts

    streamed = "data_mode=stream" in overrides
    source = ["dataset=folder", f"data_dir={data['folder']}", "data_budget_gb=0.0001"] if streamed else []
    source = source or ["dataset=digits"]
    run = [f"device={data['device']}", f"batch_size={data['batch']}", f"workers={data['workers']}"]
    extra = data.get("overrides", [])
    cfg = resolve_config(preset, [*overrides, *source, *run, "repeated_aug=1", "compile=false", *extra])
    plan = resolve_plan(cfg, torch.device(data["device"]))
    configure_cuda_math(cfg, plan.device)
    source = open_data(plan)  # the builder's steps (convinit.train.opening), without a run folder
    model = open_model(plan, source_shape(source)).to(plan.device)  # in the run's layout
    return cfg, source, step_parts(plan, source, model, DistributedContext())


def audit_case(name: str, data: dict[str, str], steps: int, results: Path) -> None:
    """One recipe's steps under the sync debug mode: synchronising calls per step, and where."""
    from convinit.train.step_parts import StepTotals
    from convinit.train.trainer import train_step

    cfg, source, parts = run_config(*AUDIT_CASES[name], data)
    device = torch.device(data["device"])
    totals, batches = StepTotals(device), iter(source.train)
    train_step(parts, totals, *next(batches), 0)  # lazy state: optimiser moments, per-size tables
    synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            for index in range(1, 1 + steps):
                train_step(parts, totals, *next(batches), index)
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    sites = sorted({f"{Path(w.filename).name}:{w.lineno}" for w in syncs})
    counted = device.type == "cuda"
    record(results, "audit", case=name, steps=steps, syncs_per_step=len(syncs) / steps if counted else None,
           sites=sites[:8], data=source.mode)  # fmt: skip


def audit(args: argparse.Namespace) -> None:
    data = {"device": args.device, "batch": str(args.batch), "workers": str(args.loader_workers),
            "folder": args.folder, "overrides": args.override}  # fmt: skip
    for name in AUDIT_CASES:
        try:
            audit_case(name, data, args.steps, args.results)
        except Exception as exc:  # one case failing must not hide the others
            record(args.results, "audit", case=name, error=f"{type(exc).__name__}: {exc}"[:300])


def build_pair(family: str, size: int, impl: str) -> nn.Module:
    """convinit's or timm's model of `family` at `size` px (10 classes)."""
    ours, theirs, timm_args = STEP_MODELS[family]
    shape = {"img_size": size, "patch_size": PATCH[size], "num_classes": 10}
    if impl == "convinit":
        from convinit.models.registry import create_model

        return create_model(ours, **shape)
    import timm

    return timm.create_model(theirs, pretrained=False, **shape, **timm_args)


def step_rate(family: str, size: int, impl: str, compiled: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Median images/s of the trainer step for one model, and its FLOP/s as fractions of the peaks."""
    from convinit.config import resolve_config
    from convinit.data import BatchAugment, MixupCutmix
    from convinit.speed.models import StepSetup, train_flops
    from convinit.train.optim import build_optimizer, build_scheduler
    from convinit.train.step_parts import StepParts, StepTotals, compile_mode
    from convinit.train.trainer import train_step

    device, batch = torch.device(args.device), args.batch
    cfg = resolve_config(None, ["compile=true", f"device={args.device}"])
    model = build_pair(family, size, impl).to(device)
    optimizer = build_optimizer(model, cfg)
    net = torch.compile(model, mode=compile_mode(cfg, device)) if compiled else model
    mean = (0.5, 0.5, 0.5)
    parts = StepParts(
        net=net,
        model=model,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, cfg, 1000),
        scaler=torch.amp.GradScaler(device.type, enabled=False),
        criterion=nn.CrossEntropyLoss(label_smoothing=0.1),
        mix=MixupCutmix(10),
        augment=BatchAugment(mean, mean, train=True, hflip=True).to(device),
        teacher=None,
        ema=None,
        layout=torch.contiguous_format,
        dtype=torch.bfloat16,
        distill_weight=0.0,
        clip_grad=1.0,
        check_loss=True,
    )
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    totals, times = StepTotals(device), []
    for index in range(args.warmup + args.repeats):
        synchronize(device)
        start = time.perf_counter()
        train_step(parts, totals, images, labels, index)
        synchronize(device)
        times.append(time.perf_counter() - start)
    median = sorted(times[args.warmup :])[args.repeats // 2]
    flops = train_flops(lambda: build_pair(family, size, impl), StepSetup(batch, device, torch.bfloat16))
    return {"images_per_s": batch / median, "tflop_per_s": flops / median / 1e12,
            "first_steps_s": sum(times[: args.warmup])}  # fmt: skip


def steps(args: argparse.Namespace) -> None:
    """Eager rows of every model and size first, then compiled ones: a cap cuts the slowest rows."""
    from convinit.speed.machine import matmul_rate

    device = torch.device(args.device)
    matmul = matmul_rate(device, torch.bfloat16) / 1e12
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = next((tflops for key, tflops in DATASHEET_BF16_TFLOPS.items() if key in name), None)
    record(
        args.results, "steps", row="bf16 matmul", device=name, tflop_per_s=matmul, datasheet_tflop_per_s=peak
    )
    impls = ["convinit", "timm"] if not args.no_timm else ["convinit"]
    rows = [(False, f, s, i) for s in args.sizes for f in args.models for i in impls]
    if args.compiled:  # convinit's at the largest size first: what a cap should keep
        sizes = sorted(args.sizes, reverse=True)
        rows += [(True, f, s, i) for i in impls for s in sizes for f in args.models]
    for compiled, family, size, impl in rows:
        label = dict(model=family, px=size, impl=impl, compiled=compiled, batch=args.batch)
        try:
            rate = step_rate(family, size, impl, compiled, args)
        except Exception as exc:
            record(args.results, "steps", **label, error=f"{type(exc).__name__}: {exc}"[:300])
            continue
        fractions = {"of_matmul": rate["tflop_per_s"] / matmul}
        if peak:
            fractions["of_datasheet"] = rate["tflop_per_s"] / peak
        record(args.results, "steps", **label, **rate, **fractions)
        torch._dynamo.reset()


def stream(args: argparse.Namespace) -> None:
    from convinit.speed.stream import stream_throughput

    for workers in args.workers:  # one row per count: a cap keeps the counts already measured
        rates = stream_throughput([workers], images=args.images, img_size=args.size, batch_size=32, warmup=1,
                                  repeats=2)  # fmt: skip
        record(args.results, "stream", workers=workers, px=args.size,
               images_per_s=rates["images_per_s"][str(workers)])  # fmt: skip


def ddp(args: argparse.Namespace) -> None:
    """One rank (NCCL on CUDA, gloo on the CPU) of DistributedDataParallel over the real step, evaluated
    with the sharded, all-reduced evaluation."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from convinit.train.step_parts import StepTotals
    from convinit.train.trainer import evaluate, train_step

    device = torch.device(args.device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    try:
        data = {"device": args.device, "batch": str(args.batch), "workers": "0", "overrides": args.override}
        cfg, source, parts = run_config("paper1/recipe", ["hflip=true", "crop_padding=4"], data)
        parts.net, parts.check_loss = DistributedDataParallel(parts.model), False
        totals, start = StepTotals(device), time.perf_counter()
        for index, (images, labels) in enumerate(source.train):
            train_step(parts, totals, images, labels, index)
        synchronize(device)
        seconds = time.perf_counter() - start
        reduced = SimpleNamespace(enabled=True)  # all-reduce the evaluation sums, as with more ranks
        args_eval = (source.test, source.eval_transform, parts.dtype, parts.layout, reduced)
        loss, acc = evaluate(parts.model, *args_eval)
        seen = totals.read()["seen"]
        record(args.results, "ddp", backend=dist.get_backend(), steps=len(source.train), images=seen,
               images_per_s=seen / seconds, test_loss=loss, test_acc=acc)  # fmt: skip
    finally:
        dist.destroy_process_group()


def summary(args: argparse.Namespace) -> None:
    """Every line of the results file, grouped by stage, as plain tables."""
    lines = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    for stage in dict.fromkeys(line["stage"] for line in lines):
        print(f"\n== {stage}")
        for line in (entry for entry in lines if entry["stage"] == stage):
            print("  " + "  ".join(f"{k}={fmt(v)}" for k, v in line.items() if k != "stage"))


def fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m convinit.speed.gpu")
    main.add_argument("stage", choices=["audit", "steps", "stream", "ddp", "summary"])
    main.add_argument("--results", type=Path, required=True)
    main.add_argument("--device", default="cuda")
    main.add_argument("--batch", type=int, default=256)
    main.add_argument("--folder", default="", help="a class-per-folder image tree (audit's streamed cases)")
    main.add_argument("--steps", type=int, default=5, help="audited steps per case")
    main.add_argument("--loader-workers", type=int, default=4, help="DataLoader workers of streamed cases")
    main.add_argument("--override", action="append", default=[], help="config override for every run")
    main.add_argument("--models", type=lambda s: s.split(","), default=list(STEP_MODELS))
    main.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[32, 224])
    main.add_argument("--compiled", action="store_true", help="also time compiled rows, after the eager ones")
    main.add_argument("--no-timm", action="store_true")
    main.add_argument("--warmup", type=int, default=3)
    main.add_argument("--repeats", type=int, default=10)
    main.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[0, 4, 8, 16])
    main.add_argument("--images", type=int, default=256, help="JPEGs per streamed pass")
    main.add_argument("--size", type=int, default=224, help="streamed crop size")
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    {"audit": audit, "steps": steps, "stream": stream, "ddp": ddp, "summary": summary}[args.stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
