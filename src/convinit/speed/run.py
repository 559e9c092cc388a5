"""`convinit bench`: every figure of BENCHMARKS.md from one process, with the machine it ran on.

Models are timed in groups (a convinit model, its timm twin and, for ConViT, its same-shape ViT), each
group interleaved and repeated; images/s come from the median step. timm twins always run eager; with
`compile` on or both, the convinit models also run under torch.compile.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from convinit.data import DeviceLoader
from convinit.errors import ConfigError
from convinit.speed import costs
from convinit.speed.machine import describe, matmul_flops, matmul_rate, matmul_size, square_matmul
from convinit.speed.models import (
    BENCH_MODELS,
    INPUT,
    SAME_SHAPE_VIT,
    BenchModel,
    StepSetup,
    TrainStep,
    bench_models,
    inference_step,
    train_flops,
)
from convinit.speed.pipeline import full_augmentation, pipeline_throughput, synthetic_dataset
from convinit.speed.stream import stream_throughput
from convinit.speed.timing import interleaved_medians, synchronize

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
COMPILE_MODES = ("off", "on", "both")


@dataclass
class BenchOptions:
    """What `convinit bench` measures; the defaults fit 2 CPU cores in about two minutes."""

    models: list[str] = field(default_factory=lambda: list(BENCH_MODELS))
    batch_size: int | None = None  # None: 16 on a CPU, 512 on a GPU
    device: str = "auto"
    precision: str = "fp32"
    compile: str = "off"
    channels_last: bool = False  # for ConvMixer (convinit's and timm's)
    timm: bool = True  # compare with timm when it is installed (a note says so when it is not)
    warmup: int = 1
    repeats: int = 5
    pipeline: bool = True
    stream_workers: list[int] = field(default_factory=lambda: [0, 2])  # [] skips the streamed path
    costs: bool = True
    epoch: bool = False  # one CIFAR-10-shaped epoch (50,000 images) per model, data on the device
    epoch_images: int = 50_000


def check_options(options: BenchOptions) -> torch.device:
    """Every option checked before any work; returns the device."""
    from convinit.train.process import resolve_device

    if options.precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {options.precision!r}")
    if options.compile not in COMPILE_MODES:
        raise ConfigError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {options.compile!r}")
    for name in ("warmup", "repeats"):
        if getattr(options, name) < (0 if name == "warmup" else 1):
            raise ConfigError(f"{name} must be {'>= 0' if name == 'warmup' else '>= 1'}")
    if options.batch_size is not None and options.batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {options.batch_size}")
    if any(n < 0 for n in options.stream_workers):
        raise ConfigError(f"stream worker counts must be >= 0, got {options.stream_workers}")
    if options.epoch_images < 1:
        raise ConfigError(f"epoch images must be >= 1, got {options.epoch_images}")
    bench_models(options.models)
    return resolve_device(options.device)


def timm_available() -> bool:
    try:
        import timm  # noqa: F401
    except ImportError:
        return False
    return True


def cases_for(spec: BenchModel, options: BenchOptions) -> dict[str, dict[str, Any]]:
    """The rows of one group: label -> {impl, compile, model builder}."""
    rows: dict[str, dict[str, Any]] = {}
    for compiled in {"off": [False], "on": [True], "both": [False, True]}[options.compile]:
        rows[f"convinit{' compiled' if compiled else ''}"] = {
            "impl": "convinit",
            "compile": compiled,
            "build": spec.build,
        }
    if options.timm and spec.timm is not None:
        rows["timm"] = {"impl": "timm", "compile": False, "build": spec.timm}
    if spec.name in SAME_SHAPE_VIT:
        kwargs = SAME_SHAPE_VIT[spec.name]
        label = "same-shape ViT (" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        rows[label] = {
            "impl": "convinit",
            "compile": False,
            "build": lambda: BenchModel(spec.name, kwargs).build(),
        }
    return rows


def bench_group(
    spec: BenchModel, options: BenchOptions, setup: StepSetup
) -> tuple[list[dict[str, Any]], dict[str, TrainStep]]:
    """Train and inference throughput of one group, timed interleaved with the matmul that measures the
    machine's rate in the same minutes (a shared CPU's speed drifts); FLOPs per training step."""
    torch.manual_seed(0)
    rows = cases_for(spec, options)
    channels_last = options.channels_last and spec.name == "convmixer"
    steps: dict[str, TrainStep] = {}
    cases = {"matmul": square_matmul(setup.device, setup.dtype or torch.float32)}
    flops = {}
    for label, row in rows.items():
        row_setup = replace(setup, compile=row["compile"], channels_last=channels_last)
        flops[label] = train_flops(row["build"], row_setup)
        steps[label] = TrainStep(row["build"](), row_setup)
        cases[f"{label}/train"] = steps[label]
        cases[f"{label}/infer"] = inference_step(row["build"](), row_setup)
    timing = interleaved_medians(cases, setup.device, options.warmup, options.repeats)
    peak = matmul_flops(setup.device) / timing["matmul"]["median"]
    results = []
    for label, row in rows.items():
        train_s = timing[f"{label}/train"]["median"]
        infer_s = timing[f"{label}/infer"]["median"]
        achieved = flops[label] / train_s
        results.append(
            {
                "model": spec.name,
                "row": label,
                "impl": row["impl"],
                "compile": row["compile"],
                "channels_last": channels_last,
                "train_images_per_s": setup.batch_size / train_s,
                "infer_images_per_s": setup.batch_size / infer_s,
                "train_spread": [setup.batch_size / timing[f"{label}/train"][k] for k in ("max", "min")],
                "train_gflop_per_image": flops[label] / setup.batch_size / 1e9,
                "achieved_tflop_per_s": achieved / 1e12,
                "matmul_tflop_per_s": peak / 1e12,
                "matmul_fraction": achieved / peak,
            }
        )
    return results, steps


def ratios(rows: list[dict[str, Any]], pipeline: dict[str, Any] | None) -> dict[str, float]:
    """The headline figures: convinit over timm, ConViT over its same-shape ViT, pipeline over training.

    convinit's row is the eager one, or the compiled one when only that was measured (`compile=on`).
    """
    out: dict[str, float] = {}
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_model.setdefault(row["model"], {})[row["row"]] = row
    for model, group in by_model.items():
        ours = group.get("convinit", group.get("convinit compiled"))
        if ours is None:
            continue
        if "timm" in group:
            for mode in ("train", "infer"):
                key = f"{mode}_images_per_s"
                out[f"{model}: {mode} convinit/timm"] = ours[key] / group["timm"][key]
        for label, row in group.items():
            if label.startswith("same-shape ViT"):
                speed = ours["train_images_per_s"] / row["train_images_per_s"]
                out[f"{model}: train over its {label}"] = speed
        if "convinit compiled" in group and "convinit" in group:
            out[f"{model}: train compiled/eager"] = (
                group["convinit compiled"]["train_images_per_s"] / ours["train_images_per_s"]
            )
        if pipeline is not None:
            out[f"{model}: data pipeline/train"] = pipeline["images_per_s"] / ours["train_images_per_s"]
    return out


def one_epoch(step: TrainStep, setup: StepSetup, images: int) -> dict[str, float]:
    """One epoch over `images` device-resident CIFAR-shaped images, full augmentation, every step timed."""
    data, labels = synthetic_dataset(images)
    loader = DeviceLoader(data, labels, setup.batch_size, setup.device, shuffle=True, drop_last=True)
    augment, mix = full_augmentation(setup.device)
    synchronize(setup.device)
    start = time.perf_counter()
    for batch_images, batch_labels in loader:
        inputs, targets = mix(augment(batch_images), batch_labels)
        if step.setup.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        step(inputs, targets)
    synchronize(setup.device)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "images_per_s": len(loader) * setup.batch_size / seconds}


def run_bench(options: BenchOptions, progress: Any = None) -> dict[str, Any]:
    """Measure everything `options` asks for; returns the JSON-ready result."""
    device = check_options(options)
    notes = []
    if options.timm and not timm_available():
        options = replace(options, timm=False)
        notes.append('timm is not installed, so there are no timm rows: pip install "convinit[timm]"')
    say = progress or (lambda message: None)
    dtype = PRECISIONS[options.precision]
    batch_size = options.batch_size or (512 if device.type == "cuda" else 16)
    setup = StepSetup(batch_size, device, dtype)
    started = time.perf_counter()
    say("measuring the matmul rate")
    matmul_dtype = dtype or torch.float32
    peak = matmul_rate(device, matmul_dtype)
    result: dict[str, Any] = {
        "machine": describe(device),
        "settings": {**asdict(options), "batch_size": batch_size, "input": list(INPUT)},
        "matmul": {
            "dtype": str(matmul_dtype).removeprefix("torch."),
            "tflop_per_s": peak / 1e12,
            "size": matmul_size(device),
        },
        "notes": notes,
        "models": [],
    }
    pipeline = None
    if options.pipeline:
        say("timing the data pipeline")
        pipeline = pipeline_throughput(batch_size, device)
        result["pipeline"] = pipeline
        if options.stream_workers and timm_available():
            say("timing the streamed data path")
            result["stream"] = stream_throughput(
                options.stream_workers, warmup=options.warmup, repeats=options.repeats
            )
    epochs = {}
    for spec in bench_models(options.models):
        say(f"timing {spec.name}")
        rows, steps = bench_group(spec, options, setup)
        result["models"].extend(rows)
        if options.epoch:
            label = "convinit compiled" if "convinit compiled" in steps else "convinit"
            say(f"one {options.epoch_images}-image epoch of {spec.name} ({label})")
            epochs[spec.name] = {"row": label, **one_epoch(steps[label], setup, options.epoch_images)}
        del steps
    if epochs:
        result["epoch"] = epochs
    result["ratios"] = ratios(result["models"], pipeline)
    if options.costs:
        say("timing impulse init and GPSA")
        result["impulse_init"] = {
            "closed_form": costs.closed_form_impulse(),
            "closed_form_images": costs.closed_form_impulse(images=64),
            "optimizer": costs.optimizer_impulse(),
        }
        result["gpsa"] = costs.gpsa_cost(batch_size, device, dtype)
    result["seconds"] = time.perf_counter() - started
    return result
