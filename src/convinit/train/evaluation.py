"""Test loss and accuracy, and the analysis trackers, of a model or of a run's newest checkpoint."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from convinit.system.denormals import denormals_flushed
from convinit.train.device import resolve_device
from convinit.train.distributed import DistributedContext
from convinit.train.opening import open_run


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    transform: Callable[[torch.Tensor], torch.Tensor],
    dtype: torch.dtype | None,
    layout: torch.memory_format = torch.contiguous_format,
    ddp: DistributedContext | None = None,
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (%) over the loader, in the training run's precision and layout;
    the sums stay on the device and are read once at the end. Under DDP each rank evaluates its shard
    of the test set (the loader's) and the sums are all-reduced, so every rank returns the whole set's."""
    model.eval()
    device = next(itertools.chain(model.parameters(), model.buffers())).device
    exact = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
    totals = torch.zeros(3, device=device, dtype=exact)  # loss sum, correct, samples
    for images, labels in loader:
        inputs = transform(images).contiguous(memory_format=layout)
        labels = labels.to(inputs.device, non_blocking=True)
        with torch.autocast(inputs.device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
        correct = (logits.argmax(1) == labels).sum().to(exact)
        loss = F.cross_entropy(logits.float(), labels, reduction="sum").to(exact)
        totals += torch.stack([loss, correct, torch.full_like(correct, len(labels))])
    if ddp is not None and ddp.enabled:
        dist.all_reduce(totals)
    loss, correct, count = totals.tolist()
    return loss / count, 100.0 * correct / count


@torch.no_grad()
def run_trackers(model: nn.Module, names: list[str], images: torch.Tensor) -> dict[str, float]:
    """The per-epoch analysis figures (`track=[nonlocality, gates]`) on a fixed batch of test images."""
    if not names:
        return {}
    from convinit.analysis import get_tracker

    model.eval()
    values: dict[str, float] = {}
    for name in names:
        values.update(get_tracker(name)(model, images))
    return values


def evaluate_run(run_dir: str | Path, ema: bool = False, device: str = "auto") -> dict[str, float]:
    """Test loss and accuracy of a run's newest intact checkpoint, read as the run reads its test set,
    in its precision and layout, with its own thread count and, on a CPU, with subnormal floats flushed
    as training flushed them (its sums, to the digit)."""
    run = open_run(run_dir, resolve_device(device), ema=ema, settle=True)
    data, plan = run.data, run.plan
    with denormals_flushed(plan.device.type == "cpu" and plan.cfg.flush_denormal):  # as the run trained
        loss, acc = evaluate(run.model, data.test, data.eval_transform, plan.dtype, plan.layout)
    return {
        "checkpoint": str(run.checkpoint),
        "test_loss": loss,
        "test_acc": acc,
        "epoch": run.epoch,
        "split": data.evaluated_on,  # validation: the run holds out part of its training images
    }


def evaluation_line(result: dict[str, float | str], ema: bool = False) -> str:
    """`evaluate_run`'s result as `convinit eval` prints it: accuracy to 0.01 %, loss to 4 digits."""
    weights = " EMA weights" if ema else ""
    accuracy, loss = f"{result['test_acc']:.2f}%", f"{result['test_loss']:.4g}"
    where = f"{result['checkpoint']}{weights} (epoch {result['epoch']})"
    split = result.get("split", "test")
    return f"{where}: {split} accuracy {accuracy}, {split} loss {loss}"
