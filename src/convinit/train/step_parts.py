"""The training step's pieces, built once per run by `step_parts` (the one constructor the trainer and
the benchmarks use): the wrapped model, optimiser, schedule, loss scaler, loss, mixing, teacher and EMA;
the running totals the step keeps on the device; and the run's resumable state around them.

What the step does with them, and why it never reads the device, is in `convinit.train.trainer`.

`TrainState.state_dict()` is what a checkpoint's `train_state.pt` holds (optimiser, schedule, loss scaler,
every RNG, position in the epoch, the epoch's running sums, non-finite steps skipped so far);
`load_state_dict()` puts a resumed run exactly where the interrupted one was.

The teacher: DeiT's hard distillation: the frozen teacher whose argmax is a second target.

A teacher is checked before the student's run folder is touched (`check_teacher`): it is not the
student's own folder, it holds an intact checkpoint (or is an export), and it was trained on images of
the student's classes, channels and size. Only then is the folder prepared, and the teacher itself
opened where it always was (after the student's init), so the random streams of a distilled run stay
those of the runs kept under results/.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel

from convinit.config import TrainConfig
from convinit.data import MixupCutmix
from convinit.data.source import DataSource
from convinit.errors import ConfigError
from convinit.models.pretrained import CONFIG, from_pretrained, read_pretrained_config
from convinit.runs.checkpoint import latest_checkpoint
from convinit.runs.preprocessing_record import read_data_record
from convinit.runs.run_dir import CONFIG_FILE, refuse_if_all_damaged
from convinit.train.opening import open_run, record_shape
from convinit.train.optim import build_optimizer, build_scheduler
from convinit.train.plan import DataShape, RunPlan
from convinit.train.process import DistributedContext, restore_rng_state, rng_state


class DeviceEMA(AveragedModel):
    """torch's AveragedModel EMA (same state dict: `module.*` and `n_averaged`), updated without reading
    the device: torch's `update_parameters` reads `n_averaged` back twice per call, and the decay is
    applied as a tensor so that a skipped step (`updated` 0) leaves the average untouched.

    The floating-point tensors are updated in a fixed number of fused launches whatever the model's
    tensor count: `_foreach_lerp_` with a list of 0-dim weights falls off torch's fused path (one kernel
    per tensor); a Python weight and one 0-dim tensor per `_foreach_mul_` stay on it."""

    def __init__(self, model: nn.Module, decay: float):
        super().__init__(model, use_buffers=True)
        self.decay = decay

    @torch.no_grad()
    def update_parameters(self, model: nn.Module, updated: torch.Tensor | None = None) -> None:
        ours = list(itertools.chain(self.module.parameters(), self.module.buffers()))
        theirs = list(itertools.chain(model.parameters(), model.buffers()))  # no_grad: no detach needed
        first = self.n_averaged == 0  # the first update copies, as AveragedModel does
        step = torch.ones_like(first) if updated is None else updated.bool()
        floats = [(a, b) for a, b in zip(ours, theirs, strict=True) if a.is_floating_point()]
        if floats:
            fused_update(*map(list, zip(*floats, strict=True)), 1 - self.decay, first, step)
        for a, b in zip(ours, theirs, strict=True):
            if not a.is_floating_point():  # integer buffers (BatchNorm's counter): AveragedModel's rule
                averaged = torch.where(first, b, (a * self.decay + b * (1 - self.decay)).to(a.dtype))
                a.copy_(torch.where(step, averaged, a))
        self.n_averaged += 1


def fused_update(
    averaged: list[torch.Tensor],
    current: list[torch.Tensor],
    weight: float,
    first: torch.Tensor,
    step: torch.Tensor,
) -> None:
    """averaged <- lerp(averaged, current, weight) on a normal step, current on the first, unchanged on a
    skipped one: seven fused launches, each choice made by multiplying by a 0-dim 0/1 flag (exact for
    finite values), so the result equals a per-tensor `lerp_` with the weight 0, 1 or `weight` bit for
    bit. One temporary copy of the average, reused for both terms."""
    dtype = averaged[0].dtype
    term = torch._foreach_lerp(averaged, current, weight)
    torch._foreach_mul_(term, (step & ~first).to(dtype))
    torch._foreach_mul_(averaged, (~step).to(dtype))
    torch._foreach_add_(averaged, term)
    torch._foreach_copy_(term, current)
    torch._foreach_mul_(term, (step & first).to(dtype))
    torch._foreach_add_(averaged, term)


class StepTotals:
    """Running sums of an epoch on the device, and the non-finite steps of the run."""

    def __init__(self, device: torch.device):
        dtype = torch.float32 if device.type == "mps" else torch.float64
        self.sums = torch.zeros(3, device=device, dtype=dtype)  # loss * n, correct, samples
        self.skipped = torch.zeros((), device=device, dtype=torch.long)
        self.first_bad = torch.full((), -1, device=device, dtype=torch.long)  # global step index

    def add(
        self, loss: torch.Tensor, correct: torch.Tensor, count: int, bad: torch.Tensor, index: int
    ) -> None:
        # Python numbers enter as kernel arguments (a multiply, a fill), never as copied tensors: on CUDA
        # `new_tensor(count)` is a blocking host-to-device copy, which drains the queue like a read.
        correct = correct.to(self.sums.dtype)
        step = torch.stack(
            [loss.detach().to(self.sums.dtype) * count, correct, torch.full_like(correct, count)]
        )
        self.sums += torch.where(bad, 0.0, step)
        self.skipped += bad.long()
        first = bad & (self.first_bad < 0)
        self.first_bad = torch.where(first, torch.full_like(self.first_bad, index), self.first_bad)

    def read(self) -> dict[str, float | int]:
        """Every total in one device-to-host read."""
        loss, correct, seen, skipped, first_bad = torch.cat(
            [self.sums.double(), torch.stack([self.skipped, self.first_bad]).double()]
        ).tolist()
        return {"loss": loss, "correct": int(correct), "seen": int(seen), "skipped": int(skipped),
                "first_bad": int(first_bad)}  # fmt: skip

    def load(self, running: dict[str, Any], skipped: int) -> None:
        """Restore the sums a checkpoint saved (`running`) and the run's skip count."""
        values = [running["loss"], running["correct"], running["seen"]]
        self.sums.copy_(torch.tensor(values, dtype=self.sums.dtype))
        self.skipped.fill_(skipped)

    def new_epoch(self) -> None:
        self.sums.zero_()


@dataclass
class StepParts:
    """Everything one training step touches, built once per run."""

    net: nn.Module  # what the forward runs: the model, or its DDP / compiled wrapper
    model: nn.Module  # the plain model whose parameters are clipped and averaged
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    criterion: nn.Module
    mix: Any  # MixupCutmix
    augment: nn.Module
    teacher: nn.Module | None
    ema: DeviceEMA | None
    layout: torch.memory_format
    dtype: torch.dtype | None
    distill_weight: float
    clip_grad: float | None
    check_loss: bool  # False under DDP: the loss is per rank, the all-reduced gradient norm is shared

    @property
    def fused(self) -> bool:
        return bool(self.optimizer.defaults.get("fused"))


@dataclass
class TrainState:
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    totals: StepTotals
    epoch: int = 0
    step: int = 0  # steps of `epoch` already taken
    seconds: float = 0.0  # training seconds of `epoch` before an interruption
    extra: dict[str, Any] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        """Reads the device once (the running sums): call it at checkpoints, not every step."""
        sums = self.totals.read()
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(),
            "epoch": self.epoch,
            "step": self.step,
            "running": {
                "loss": sums["loss"],
                "correct": sums["correct"],
                "seen": sums["seen"],
                "seconds": self.seconds,
            },
            "skipped": sums["skipped"],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):  # fp16 runs only (a disabled scaler saves {})
            self.scaler.load_state_dict(state["scaler"])
        restore_rng_state(state["rng"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.seconds = state["running"].get("seconds", 0.0)
        # absent in checkpoints written before skipped steps were saved
        self.totals.load(state["running"], state.get("skipped", 0))


# --- the teacher (DeiT's hard distillation) ---


def refuse_own_teacher(teacher: str | None, run_dir: Path) -> None:
    """A run cannot learn from itself: its folder would be emptied (or overwritten) before it is read."""
    if teacher is None:
        return
    mine, theirs = Path(run_dir).resolve(), Path(teacher).resolve()
    if mine == theirs or mine.is_relative_to(theirs) or theirs.is_relative_to(mine):
        raise ConfigError(
            f"teacher {teacher} is this run's own folder {run_dir} (or lies inside it): a run cannot be its "
            "own teacher; pass a finished run or an export elsewhere, or another --out"
        )


def teacher_shape(teacher: str) -> DataShape | None:
    """The classes, channels and image size the teacher was trained on, read from its files without
    building it; ConfigError when it holds no intact checkpoint. None: a run too old to record them."""
    path = Path(teacher)
    if (path / CONFIG_FILE).is_file():
        if latest_checkpoint(path) is None:
            refuse_if_all_damaged(path)  # damaged checkpoints: each named in one line
            raise ConfigError(f"teacher {path} holds no intact checkpoint yet; train it first")
        record = read_data_record(path)
        return None if record is None else record_shape(record)
    config = read_pretrained_config(path / CONFIG, f"teacher {path}")
    args = config["model_args"]
    return DataShape(args["num_classes"], args["in_chans"], config.get("img_size", args.get("img_size")))


def check_teacher(teacher: str | None, shape: DataShape | None) -> None:
    """Refuse, in one line and before the student's folder is touched, a teacher that cannot label the
    student's images: another class count, channel count or image size (`shape`: the student's data;
    None: not known yet, only the checkpoint is checked)."""
    if teacher is None:
        return
    known = teacher_shape(teacher)
    if known is None or shape is None:
        return
    pairs = {
        "classes": (known.num_classes, shape.num_classes),
        "channels": (known.in_chans, shape.in_chans),
        "image size": (sides(known.img_size), sides(shape.img_size)),
    }
    for what, (theirs, ours) in pairs.items():
        if theirs is not None and theirs != ours:
            raise ConfigError(
                f"teacher {teacher} was trained on {what} {format_value(theirs)} but this run's data has "
                f"{format_value(ours)}; pass a teacher trained on images like this run's"
            )


def sides(size: int | tuple[int, int] | list[int] | None) -> tuple[int, int] | None:
    """(h, w) of an image size given as n, (h, w) or [h, w]; None when not recorded."""
    if size is None:
        return None
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def format_value(value: object) -> str:
    """28 for (28, 28), 28x32 for (28, 32): sizes as a user writes them."""
    if isinstance(value, tuple):
        return str(value[0]) if value[0] == value[1] else "x".join(str(v) for v in value)
    return str(value)


def load_teacher(teacher: str | None, num_classes: int, device: torch.device) -> nn.Module | None:
    """The frozen teacher for hard distillation (the config's `teacher`): a training run, at its newest
    checkpoint (opened as every run is reopened), or a saved model (`convinit export`)."""
    if teacher is None:
        return None
    path = Path(teacher)
    if (path / CONFIG_FILE).is_file():
        opened = open_run(path, data=False)  # not reseeding this run's generators
        model, classes = opened.model, len(opened.record["classes"])
    else:
        model = from_pretrained(path)
        classes = model.model_kwargs["num_classes"]
    if classes != num_classes:
        raise ConfigError(f"teacher {path} predicts {classes} classes but the training set has {num_classes}")
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval().to(device)


def compile_mode(cfg: TrainConfig, device: torch.device, distributed: bool = False) -> str:
    """`compile_mode=auto`: on one GPU, `reduce-overhead`: CUDA graphs replay the forward and backward
    (the step reads nothing back, so nothing stops a replay) without max-autotune's minutes of kernel
    search on the first step. Under DDP and on other devices torch's default: DDP splits the compiled
    graph at its gradient buckets and all-reduces between the pieces, a combination with CUDA graphs
    this project has not measured."""
    if cfg.compile_mode != "auto":
        return cfg.compile_mode
    return "reduce-overhead" if device.type == "cuda" and not distributed else "default"


def step_parts(plan: RunPlan, data: DataSource, model: nn.Module, ddp: DistributedContext) -> StepParts:
    """The training step's pieces: optimiser, schedule, scaler, loss, mixing, teacher, EMA, wrappers."""
    cfg, device = plan.cfg, plan.device
    optimizer = build_optimizer(model, cfg)
    net = DistributedDataParallel(model) if ddp.enabled else model  # DDP syncs weights from rank 0
    if cfg.compile:  # after DDP, so torch's DDPOptimizer splits graphs at gradient buckets;
        # `model` stays uncompiled for checkpoints, EMA and evaluation
        net = torch.compile(net, mode=compile_mode(cfg, device, ddp.enabled))
    return StepParts(
        net=net,
        model=model,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, cfg, len(data.train)),
        # fp16 needs loss scaling: small gradients would underflow to 0 (disabled, every call is a no-op)
        scaler=torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16"),
        criterion=nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing),
        mix=MixupCutmix(data.num_classes, cfg.mixup, cfg.cutmix),
        augment=data.augment,
        teacher=load_teacher(cfg.teacher, data.num_classes, device),
        ema=DeviceEMA(model, cfg.ema_decay) if cfg.ema_decay else None,
        layout=plan.layout,
        dtype=plan.dtype,
        distill_weight=cfg.distill_weight,
        clip_grad=cfg.clip_grad,
        check_loss=not ddp.enabled,  # under DDP the loss is per rank; the all-reduced gradient norm is shared
    )
