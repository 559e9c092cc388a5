"""One optimisation step that never waits on the host.

On a GPU every read of a device value (`loss.item()`, `bool(torch.isfinite(norm))`) drains the queue
before the next step can be launched, and none of it can run under CUDA graphs. So the step keeps its
bookkeeping on the device (`StepTotals`: loss, correct predictions, samples, non-finite steps), and the
loop reads it once every `log_every` steps, at epoch ends, checkpoints and stops.

A non-finite step (NaN/inf loss or gradient) is skipped without a read: its flag goes to the fused
optimiser as `found_inf`, torch's own mechanism for mixed precision, whose kernel then leaves weights
and moments untouched; the EMA (`DeviceEMA`) gives it weight 0. Whether to stop (`on_nonfinite=stop`)
or how many skips to allow is decided when the totals are read. Two cases still read the device every
step: fp16 (the GradScaler decides whether a step overflowed) and optimisers without a fused kernel.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel


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


def forward_loss(
    parts: StepParts, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and loss under autocast; DeiT's hard distillation adds the teacher's argmax as a target."""
    device_type = inputs.device.type
    with torch.autocast(device_type, dtype=parts.dtype, enabled=parts.dtype is not None):
        logits = parts.net(inputs)
        loss = parts.criterion(logits.float(), targets)
        if parts.teacher is not None:
            with torch.no_grad():
                teacher_labels = parts.teacher(inputs).argmax(dim=1)
            distill = F.cross_entropy(logits.float(), teacher_labels)
            loss = (1 - parts.distill_weight) * loss + parts.distill_weight * distill
    return logits, loss


def update_fp16(parts: StepParts, grad_norm: torch.Tensor, loss_finite: torch.Tensor) -> tuple[bool, bool]:
    """fp16: an overflowing gradient is the scaler's business (it skips the step and lowers the scale)
    unless the scale is already below 1; reads the device. Returns (skipped, weights updated)."""
    grads_finite = bool(torch.isfinite(grad_norm))
    overflow = not grads_finite and parts.scaler.get_scale() >= 1.0
    if not (bool(loss_finite) and (grads_finite or overflow)):
        parts.scaler.update()  # ends this step's unscale_ and lowers the scale
        return True, False
    parts.scaler.step(parts.optimizer)  # optimizer.step(), unless the gradients overflowed
    parts.scaler.update()
    return False, not overflow


def update(
    parts: StepParts, grad_norm: torch.Tensor, loss_finite: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply the step unless it is non-finite. Returns (skipped, weights updated) as device flags."""
    if parts.scaler.is_enabled():
        skipped, updated = update_fp16(parts, grad_norm, loss_finite)
        device = grad_norm.device  # fills, not copies (fp16 has read the device already)
        return torch.full((), skipped, device=device), torch.full((), updated, device=device)
    bad = ~(torch.isfinite(grad_norm) & loss_finite)
    if parts.fused:  # the fused kernel skips the update where found_inf is set: no read
        parts.optimizer.grad_scale, parts.optimizer.found_inf = None, bad.float()
        parts.optimizer.step()
        del parts.optimizer.grad_scale, parts.optimizer.found_inf
    elif not bad.item():  # an optimiser without a fused kernel: one read per step
        parts.optimizer.step()
    return bad, ~bad


def train_step(
    parts: StepParts, totals: StepTotals, images: torch.Tensor, labels: torch.Tensor, index: int
) -> None:
    """Augment, forward, backward, clip, update, schedule and average one batch; nothing is read back."""
    inputs, targets = parts.mix(parts.augment(images), labels)
    inputs = inputs.contiguous(memory_format=parts.layout)
    logits, loss = forward_loss(parts, inputs, targets)
    parts.optimizer.zero_grad(set_to_none=True)
    parts.scaler.scale(loss).backward()
    parts.scaler.unscale_(parts.optimizer)  # clip and check the true gradients, not the scaled ones
    grad_norm = nn.utils.clip_grad_norm_(parts.model.parameters(), parts.clip_grad or math.inf)
    if parts.check_loss:
        loss_finite = torch.isfinite(loss.detach())
    else:  # made on the device (a fill): a CPU tensor moved there would be a blocking copy
        loss_finite = torch.ones((), dtype=torch.bool, device=grad_norm.device)
    bad, updated = update(parts, grad_norm, loss_finite)
    parts.scheduler.step()
    if parts.ema is not None:
        parts.ema.update_parameters(parts.model, updated)
    hard = targets.argmax(dim=1) if targets.ndim == 2 else targets
    totals.add(loss, (logits.argmax(dim=1) == hard).sum(), len(labels), bad, index)
