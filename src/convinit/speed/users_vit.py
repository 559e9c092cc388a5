"""Speed in the users' regime (docs/own-models.md): the users'-ViT grid's models trained through the
trainer's own step on a CPU, each beside timm's eager model of the same shape in the same rounds, and
what GPSA and the Q/K blend cost when converted into a user's ViT (docs/speed.md says how to read it).

Every row is a run of the grid `users-vit-end` (src/convinit/configs/experiments/users-vit-end.yaml),
built as `convinit train` builds it (plan, data, model, init, `step_parts`) and stepped by
`train.trainer.train_step` on one fixed batch of its own training images; a row that the grid does not
hold says which grid row it starts from and what it changes. The reference of each row is timm's model of
the same shape in a plain eager loop (forward, cross-entropy, backward, fused AdamW: `speed.models.
TrainStep`): what a user who trains timm's ViT themselves gets.

- Table A, per torch thread count: images/s eager and compiled (torch.compile, inductor's CPU backend),
  the ratio to timm eager, and the seconds of the first compiled step beyond an eager one (the compile
  paid once). Inductor bakes the thread count into its C++ kernels, so each thread count compiles anew.
- Table B, one thread, eager: the unconverted ViT and each conversion at the 7x7 and the 14x14 grid
  (2 px patches), as a share of the unconverted ViT's speed; and, on a pretend CUDA device
  (`speed.fake_cuda`), the device operations and host waits (blocking copies, reads) of one step at two
  batch sizes.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from convinit.config import TrainConfig, parse_overrides, resolve_config
from convinit.errors import ConfigError
from convinit.models.small_heads import small_head_attention_enabled
from convinit.speed.machine import describe
from convinit.speed.models import StepSetup, TrainStep, timm_vit
from convinit.speed.timing import interleaved_medians

GRID = "users-vit-end"
CPU = torch.device("cpu")


@dataclass(frozen=True)
class Row:
    """One model of the table: the grid row it is (or starts from) and what it changes."""

    label: str
    grid_row: str | None  # the users-vit-end row whose config it takes; None: `preset`
    overrides: tuple[str, ...] = ()
    preset: str | None = None
    twin: str = "users' ViT"  # the timm model of the same shape it is compared with (TWINS)
    bias: bool = False  # a row of table B (the unconverted ViT and the conversions)
    small_heads: bool = False  # attention through convinit.models.small_heads' kernel (off: torch's SDPA)


def head_rows(counts: tuple[int, ...] = (8, 16)) -> list[Row]:
    """The recommended recipe (flushed, as `convinit train` runs it) at more heads of the same width, with
    torch's attention and with the small-head kernel, each beside timm's ViT with as many heads (issue:
    many heads at the CPU's speed; the 4-head row is "recommended recipe, flushed")."""
    recipe = "blend conversion + impulse + content projection"
    rows = []
    for heads in counts:
        keys = ("flush_denormal=true", f"model_args.num_heads={heads}")
        twin = f"users' ViT, {heads} heads"
        rows.append(Row(f"recipe, {heads} heads", recipe, keys, twin=twin))
        rows.append(Row(f"recipe, {heads} heads, kernel", recipe, keys, twin=twin, small_heads=True))
    return rows


ROWS = {
    row.label: row
    for row in (
        Row("users' ViT", "random", bias=True),
        Row("GPSA conversion", "GPSA conversion", bias=True),
        Row("blend", "random", ("convert=blend",), bias=True),
        Row(
            "blend + content projection",
            "random",
            ("convert=blend", "convert_args.content_projection=true"),
            bias=True,
        ),  # fmt: skip
        Row("recommended recipe", "blend conversion + impulse + content projection", bias=True),
        # as `convinit train` runs it by default and the vit-vs-cnn grids ran it: impulse init's peaked
        # maps are mostly subnormal floats, which this CPU computes slowly unless flushed to zero
        Row(
            "recommended recipe, flushed",
            "blend conversion + impulse + content projection",
            ("flush_denormal=true",),
            bias=True,
        ),
        *head_rows(),
        Row("convinit ConViT", "convinit ConViT (same width, depth)"),
        Row("ConvMixer", "ConvMixer (CNN)", twin="ConvMixer"),
        # paper 1's ViT-Ti/2 (docs/method.md 2.3) on the grid's data and recipe: 14x14 tokens of width 192
        Row("ViT-Ti/2", None, ("model=vit_tiny_patch2_32",), preset="own_models/recipe", twin="ViT-Ti/2"),
    )
}
GRIDS = {"7x7": 4, "14x14": 2}  # patch size on 28 px images


def timm_twin(name: str, cfg: TrainConfig, shape: tuple[int, int, int]) -> Callable[[], nn.Module]:
    """timm's model of the same shape as the row `cfg` builds, for images of `shape` (C, H, W)."""
    chans, size = shape[0], shape[-1]
    args = cfg.model_args
    if name.startswith("users' ViT"):  # the users' model is timm's: the same class and arguments
        import timm

        model = cfg.model.removeprefix("timm:") if cfg.model.startswith("timm:") else "vit_tiny_patch16_224"
        return lambda: timm.create_model(
            model, pretrained=False, img_size=size, in_chans=chans, num_classes=10, **args
        )
    if name == "ConvMixer":

        def convmixer() -> nn.Module:
            from timm.models.convmixer import ConvMixer

            return ConvMixer(args["dim"], args["depth"], kernel_size=args["kernel_size"],
                             patch_size=args["patch_size"], in_chans=chans, num_classes=10)  # fmt: skip

        return convmixer
    if name == "ViT-Ti/2":
        return timm_vit(192, 12, 3, 4.0, img_size=size, patch_size=2, in_chans=chans)
    raise ValueError(f"no timm twin {name!r}")


def row_config(row: Row, grid: str, batch_size: int, compile: bool) -> TrainConfig:
    """The row's run config: the grid's row (its scale's settings included), the row's changes, and the
    benchmark's (CPU, batch, compile, no trackers, no denormal flushing: as the grid ran, unless the row
    asks for it)."""
    settings = ["device=cpu", f"batch_size={batch_size}", f"compile={str(compile).lower()}", "track=[]",
                "flush_denormal=false", *row.overrides]  # fmt: skip
    if grid != "7x7" and row.twin == "users' ViT":
        settings.append(f"model_args.patch_size={GRIDS[grid]}")
    if row.grid_row is None:
        return resolve_config(row.preset, settings)
    return grid_configs(tuple(settings))[row.grid_row]


@functools.lru_cache(maxsize=16)
def grid_configs(settings: tuple[str, ...]) -> dict[str, TrainConfig]:
    """Every row of the grid (seed 0) with `settings` on top, by label: the grid resolves all its rows
    at once, so the rows of one setting share one resolution."""
    from convinit.experiments.grid import expand

    return {
        spec.label: spec.config for spec in expand(GRID, seeds=[0], extra_overrides=parse_overrides(settings))
    }


@dataclass
class BuiltStep:
    """One row's trainer step on a fixed batch of its own training images: a timing case."""

    cfg: TrainConfig
    parts: Any  # train.step_parts.StepParts
    images: torch.Tensor
    labels: torch.Tensor
    shape: tuple[int, int, int]
    index: int = 0
    small_heads: bool = False  # the row's attention through the small-head kernel

    def __call__(self) -> None:
        from convinit.system.denormals import denormals_flushed
        from convinit.train.step_parts import StepTotals
        from convinit.train.trainer import train_step

        if not hasattr(self, "totals"):
            self.totals = StepTotals(self.images.device)
        # as the trainer runs the step: subnormal floats flushed to zero on a CPU where the config asks
        flush = self.images.device.type == "cpu" and self.cfg.flush_denormal
        with denormals_flushed(flush), small_head_attention_enabled(self.small_heads):
            train_step(self.parts, self.totals, self.images, self.labels, self.index)
        self.index += 1


def build_step(
    cfg: TrainConfig, initialize: bool = True, device: torch.device = CPU, sources: dict | None = None
) -> BuiltStep:
    """The run's step as `convinit train` builds it (convinit.train.opening's order, without a run folder
    or the thread count the config asks for: the benchmark sets threads itself). `sources` keeps each data
    source read, by its recipe, for the next row that reads the same data (a model reads it, never changes
    it; the step takes its first batch)."""
    from convinit.train.opening import init_images, initialize_model, open_data, open_model, source_shape
    from convinit.train.plan import resolve_plan
    from convinit.train.process import DistributedContext
    from convinit.train.step_parts import step_parts

    torch.manual_seed(cfg.seed)
    plan = resolve_plan(cfg, device)
    key = repr(plan.data)
    data = sources[key] if sources is not None and key in sources else open_data(plan)
    if sources is not None:
        sources[key] = data
    model = open_model(plan, source_shape(data))
    if initialize:
        initialize_model(plan.init, model, init_images(data))
    if device.type != "cpu":
        set_up_on_host(model)
    model.to(plan.device)
    parts = step_parts(plan, data, model, DistributedContext())
    images, labels = next(iter(data.train))
    size = data.img_size if isinstance(data.img_size, int) else data.img_size[0]
    return BuiltStep(cfg, parts, images, labels, (data.in_chans, size, size))


def set_up_on_host(model: nn.Module) -> None:
    """Run, on the host, each layer's one-time set-up that leaves no per-step hook (a converted blend's
    content projector: an SVD keeping the directions above a share of the largest, whose count is read
    back), and have `step_parts` skip it: a pretend device has no values to read. It runs once per run,
    before the first step, so per-step counts are the same with it done here."""
    for module in model.modules():
        start = getattr(module, "start_training", None)
        if callable(start) and start() is None:
            module.start_training = lambda: None


@dataclass
class UsersOptions:
    """What the users'-regime benchmark measures; the defaults fit 2 shared cores in about 10 minutes."""

    rows: list[str] = field(default_factory=lambda: list(ROWS))
    threads: list[int] = field(default_factory=lambda: [1, 2])
    compile: bool = True
    batch_size: int = 64
    vit_ti_batch_size: int = 16  # ViT-Ti/2 is ~80x the users' ViT per image: 11 s a step at batch 64
    warmup: int = 1
    repeats: int = 5
    bias: bool = True  # table B: 14x14 grid and fake-CUDA counts
    fake_batches: tuple[int, int] = (16, 256)
    initialize: bool = True  # the rows' init (impulse fits on images); off: random weights, same graph
    cpu_time: bool = False  # time by the process's CPU time, not the wall clock (a shared machine)


def check(options: UsersOptions) -> None:
    unknown = [name for name in options.rows if name not in ROWS]
    if unknown:
        raise ConfigError(f"no row {unknown[0]!r}; rows: {', '.join(ROWS)}")
    if options.repeats < 1 or options.warmup < 0 or options.batch_size < 1 or options.vit_ti_batch_size < 1:
        raise ConfigError("repeats and batch sizes must be >= 1, warmup >= 0")
    if not options.threads or min(options.threads) < 1:
        raise ConfigError(f"thread counts must be >= 1, got {options.threads}")


def batch_of(row: Row, options: UsersOptions) -> int:
    return options.vit_ti_batch_size if row.twin == "ViT-Ti/2" else options.batch_size


def first_call(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def timed_block(
    rows: list[Row],
    grid: str,
    options: UsersOptions,
    compiled: bool,
    say: Callable[[str], None],
    sources: dict,
) -> dict[str, Any]:
    """Every row eager (and compiled) and each twin eager, built and timed in interleaved rounds at the
    current thread count; the first compiled step is timed apart (it compiles)."""
    cases: dict[str, Callable[[], None]] = {}
    firsts: dict[str, float] = {}
    batches: dict[str, int] = {}
    for row in rows:
        batch = batch_of(row, options)
        for mode in ("eager", "compiled") if compiled else ("eager",):
            say(f"building {row.label} ({grid}, {mode})")
            step = build_step(
                row_config(row, grid, batch, mode == "compiled"), options.initialize, sources=sources
            )
            step.small_heads = row.small_heads
            cases[f"{row.label}/{mode}"], batches[f"{row.label}/{mode}"] = step, batch
            if mode == "compiled":
                say(f"compiling {row.label}")
                firsts[row.label] = first_call(step)
        twin = f"timm {row.twin}/eager"
        if twin not in cases:
            cfg, shape = step.cfg, step.shape
            setup = StepSetup(batch, CPU, None, input=shape)
            cases[twin], batches[twin] = TrainStep(timm_twin(row.twin, cfg, shape)(), setup), batch
    say(f"timing {len(cases)} cases, {options.repeats} interleaved rounds, {torch.get_num_threads()} threads")
    clock = time.process_time if options.cpu_time else time.perf_counter
    timing = interleaved_medians(cases, CPU, options.warmup, options.repeats, clock)
    rates = {name: batches[name] / t["median"] for name, t in timing.items()}
    spread = {name: [batches[name] / t["max"], batches[name] / t["min"]] for name, t in timing.items()}
    compile_s = {
        label: first - timing[f"{label}/eager"]["median"] for label, first in firsts.items()
    }  # the first compiled step beyond what an eager step takes
    return {"images_per_s": rates, "spread": spread, "compile_s": compile_s, "batch": batches}


def with_threads(threads: int) -> Any:
    previous = torch.get_num_threads()

    class Scope:
        def __enter__(self) -> None:
            torch.set_num_threads(threads)

        def __exit__(self, *exc: object) -> None:
            torch.set_num_threads(previous)

    return Scope()


def device_counts(rows: list[Row], options: UsersOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """Device ops and host waits of one step of each row (7x7 grid) on a pretend CUDA device at each of
    `options.fake_batches`, after one uncounted step (the optimiser's lazy state)."""
    from convinit.speed.fake_cuda import CUDA, DeviceAudit, DeviceOpCount, fake_cuda

    counts: dict[str, Any] = {}
    sources: dict = {}
    with fake_cuda():
        for row in rows:
            say(f"counting {row.label}'s device ops on fake CUDA")
            cfg = row_config(row, "7x7", options.fake_batches[0], compile=False)
            step = build_step(cfg, initialize=False, device=CUDA, sources=sources)  # an init: values, not ops
            counts[row.label] = {}
            for index, batch in enumerate(options.fake_batches):
                step.images = torch.randint(0, 256, (batch, *step.shape), dtype=torch.uint8, device=CUDA)
                step.labels = torch.randint(0, 10, (batch,), device=CUDA)
                if index == 0:
                    step()
                with DeviceAudit() as waits, DeviceOpCount() as ops:
                    step()
                counts[row.label][batch] = {"ops": ops.total, "host_waits": len(waits.blocking),
                                            "waits": sorted({str(t) for t in waits.blocking})}  # fmt: skip
    return counts


def run_users_bench(
    options: UsersOptions, say: Callable[[str], None] = lambda message: None
) -> dict[str, Any]:
    """Tables A and B (see the module docstring) as a JSON-ready dict."""
    check(options)
    started = time.perf_counter()
    rows = [ROWS[name] for name in options.rows]
    sources: dict = {}  # data sources by recipe, read once
    result: dict[str, Any] = {
        "machine": {**describe(CPU), "load_average": list(os.getloadavg())},
        "options": {**options.__dict__, "fake_batches": list(options.fake_batches)},
        "threads": {},
    }
    for threads in options.threads:
        with with_threads(threads):
            torch._dynamo.reset()  # inductor's kernels are specialised to a thread count: compile anew
            load = os.getloadavg()[0]
            block = timed_block(rows, "7x7", options, options.compile, say, sources)
            result["threads"][threads] = {**block, "load_average": load}
    bias_rows = [row for row in rows if row.bias]
    if options.bias and bias_rows:
        with with_threads(1):
            result["grid_14x14"] = timed_block(bias_rows, "14x14", options, False, say, sources)
            if 1 in options.threads:  # the 7x7 figures of the same thread count, from table A
                result["grid_7x7"] = result["threads"][1]
            else:
                result["grid_7x7"] = timed_block(bias_rows, "7x7", options, False, say, sources)
        if torch.backends.cuda.is_built():
            result["device"] = device_counts(bias_rows, options, say)
        else:
            result["device_note"] = "faking CUDA needs a torch built with CUDA; this one is CPU-only"
    result["seconds"] = time.perf_counter() - started
    return result


def format_users(result: dict[str, Any]) -> str:
    """Tables A and B as text (BENCHMARKS.md quotes it)."""
    machine, options = result["machine"], result["options"]
    lines = [
        f"users'-regime speed: cpu ({machine['cpu']}), torch {machine['torch']}, fp32, batch "
        f"{options['batch_size']} (ViT-Ti/2: {options['vit_ti_batch_size']}), 28 px 1-channel input, "
        f"median of {options['repeats']} interleaved rounds"
        + (" (CPU time of the process, not the wall clock)" if options.get("cpu_time") else ""),
        "'x timm': over timm's eager model of the same shape (plain loop, fused AdamW) in the same rounds",
    ]
    for threads, block in result["threads"].items():
        lines += thread_table(threads, block, options)
    if "grid_14x14" in result:
        lines += bias_table(result, options)
    if "device" in result:
        lines += device_table(result["device"], options)
    if "device_note" in result:
        lines.append(f"note: {result['device_note']}")
    lines.append(f"\ntotal {result['seconds']:.0f} s")
    return "\n".join(lines)


def thread_table(threads: Any, block: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """Table A at one thread count: each row eager and compiled beside timm's eager twin."""
    rate = block["images_per_s"]
    lines = [
        "",
        f"A. {threads} thread{'s' if int(threads) > 1 else ''} (1-min load average "
        f"{block['load_average']:.1f} at the start)",
        f"{'row':28s} {'eager img/s':>11s} {'x timm':>7s} {'compiled':>9s} {'x timm':>7s} {'compile s':>9s}",
    ]
    for label in options["rows"]:
        twin = rate[f"timm {ROWS[label].twin}/eager"]
        eager = rate[f"{label}/eager"]
        line = f"{label:28s} {eager:11.0f} {eager / twin:6.2f}x"
        if f"{label}/compiled" in rate:
            compiled = rate[f"{label}/compiled"]
            line += f" {compiled:9.0f} {compiled / twin:6.2f}x {block['compile_s'][label]:9.1f}"
        lines.append(line)
    for name, value in rate.items():
        if name.startswith("timm "):
            lines.append(f"{name.removesuffix('/eager'):28s} {value:11.0f}  1.00x  (plain loop)")
    return lines


def bias_table(result: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """Table B's speeds: each conversion over the unconverted users' ViT at 7x7 and 14x14."""
    lines = [
        "",
        "B. what the bias costs: 1 thread, eager; 'x ViT': over the unconverted users' ViT, same step",
        f"{'row':28s} {'7x7 img/s':>9s} {'x ViT':>6s} {'14x14 img/s':>11s} {'x ViT':>6s}",
    ]
    small, large = result["grid_7x7"]["images_per_s"], result["grid_14x14"]["images_per_s"]
    base, twin = "users' ViT/eager", "timm users' ViT/eager"
    for label in [name for name in options["rows"] if ROWS[name].bias]:
        a, b = small[f"{label}/eager"], large[f"{label}/eager"]
        if base in small:
            lines.append(f"{label:28s} {a:9.0f} {a / small[base]:5.2f}x {b:11.0f} {b / large[base]:5.2f}x")
        else:
            lines.append(f"{label:28s} {a:9.0f}        {b:11.0f}")
    lines.append(f"{'timm (plain loop)':28s} {small[twin]:9.0f}        {large[twin]:11.0f}")
    return lines


def device_table(device: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """Table B's counts: device operations and host waits per step at two batch sizes."""
    small_b, large_b = options["fake_batches"]
    lines = [
        "",
        "B. one step on a pretend CUDA device (7x7 grid): device ops and host waits at two batch sizes",
        f"{'row':28s} {f'ops b{small_b}':>9s} {f'ops b{large_b}':>9s} {f'waits b{small_b}':>9s} "
        f"{f'waits b{large_b}':>10s}",
    ]
    for label, counts in device.items():
        a, b = counts[small_b], counts[large_b]
        lines.append(f"{label:28s} {a['ops']:9d} {b['ops']:9d} {a['host_waits']:9d} {b['host_waits']:10d}")
        lines += [f"    {wait}" for wait in a["waits"]]
    return lines
