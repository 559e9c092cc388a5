"""The training loop, top to bottom: plan the run, build it, train its epochs, evaluate, checkpoint, stop.

`train(cfg)` validates the config into a `RunPlan` (`validation.validate`: device, number formats, data
shape and model arguments resolved once), builds everything from that plan (`run_builder.build_run`),
trains with a progress bar, evaluates, logs `metrics.jsonl`/`metrics.csv`, and checkpoints each epoch
end and on Ctrl-C. `train(cfg, run_dir, resume=True)` continues a run from its newest intact checkpoint:
data order is a function of (seed, epoch) and every RNG is restored, so the continuation sees the same
batches.

Read in this order: `train` and `train_owned` (the run from start to end), `train_epoch` and `end_epoch`
(one epoch), `train_step` (one batch), `evaluate` (the test set); `evaluate_run` evaluates a finished
run's checkpoint as the loop evaluated it. The step's pieces are built in `convinit.train.step_parts`.

The step never waits on the host. On a GPU every read of a device value (`loss.item()`,
`bool(torch.isfinite(norm))`) drains the queue before the next step can be launched, and none of it can
run under CUDA graphs. So the step keeps its bookkeeping on the device (`StepTotals`: loss, correct
predictions, samples, non-finite steps), and the loop reads it once every `log_every` steps, at epoch
ends, checkpoints and stops, and applies `on_nonfinite` there.

A non-finite step (NaN/inf loss or gradient) is skipped without a read: its flag goes to the fused
optimiser as `found_inf`, torch's own mechanism for mixed precision, whose kernel then leaves weights
and moments untouched; the EMA (`DeviceEMA`) gives it weight 0. Whether to stop (`on_nonfinite=stop`)
or how many skips to allow is decided when the totals are read. Two cases still read the device every
step: fp16 (the GradScaler decides whether a step overflowed) and optimisers without a fused kernel.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from convinit.config import TrainConfig, config_differences, load_config
from convinit.errors import ConfigError, TrainingDiverged
from convinit.models.small_heads import small_head_attention_enabled
from convinit.runs.checkpoint import latest_checkpoint, save_checkpoint
from convinit.runs.metrics import loss_change_at_end
from convinit.runs.ownership import own_run_dir
from convinit.runs.run_dir import CONFIG_FILE, check_run_dir_path
from convinit.runs.signals import RunInterrupted, stop_at_step_boundary, stop_outside_the_loop
from convinit.runs.track_log import TrackLog, track_due
from convinit.system.atomic import atomic_write_text
from convinit.system.denormals import denormals_flushed
from convinit.train.opening import open_run
from convinit.train.plan import RunPlan
from convinit.train.process import (
    DistributedContext,
    barrier,
    explain_compile_failure,
    is_main_rank,
    resolve_device,
    seed_rank_epoch,
    setup_distributed,
    sum_across_ranks,
    under_torchrun,
)
from convinit.train.run_builder import Run, build_run
from convinit.train.step_parts import StepParts, StepTotals, refuse_own_teacher
from convinit.train.validation import validate


@dataclass
class TrainResult:
    """What `train` returns: where the run is, its trained model and its metrics rows."""

    run_dir: Path
    model: nn.Module
    metrics: list[dict[str, Any]]
    held_out: bool = False  # evaluated on a validation split of the training images, not the test set
    still_learning: str | None = None  # why the run ended before it learned what it could (None: it had)


def new_run_dir(cfg: TrainConfig, out_dir: str | Path = "runs") -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(out_dir) / f"{cfg.model}-{cfg.dataset}-s{cfg.seed}-{stamp}"


def train(
    cfg: TrainConfig | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train `cfg` into `run_dir` (a new timestamped folder under runs/ by default), or resume `run_dir`.

    The run directory is held exclusively while this runs (see `convinit.runs.ownership`): a second
    `train` or `--resume` on it is refused with the holder's PID.
    """
    if resume and (run_dir is None or not Path(run_dir).is_dir()):
        raise ConfigError(
            f"--resume {run_dir}: no such run directory; pass the folder `convinit train` wrote"
        )
    if not resume and cfg is None:
        raise ConfigError("train() needs a config or resume=True with a run directory")
    if run_dir is None and not under_torchrun():
        run_dir = new_run_dir(cfg)
    if run_dir is not None:
        check_run_dir_path(Path(run_dir))
    # a new run is planned before its directory is created: a refused run leaves nothing behind
    plan = None if resume else validate(cfg)
    if plan is not None and run_dir is not None:
        refuse_own_teacher(cfg.teacher, Path(run_dir))
    owner = own_run_dir(Path(run_dir)) if run_dir is not None and is_main_rank() else nullcontext()
    with owner, stop_outside_the_loop(run_dir):
        if resume:  # the run's own saved config, read while this process owns the run
            plan = validate(resumed_config(cfg, Path(run_dir)))
        with small_head_attention_enabled(plan.cfg.attention_kernel == "small_heads"):
            return train_owned(plan, run_dir, resume, overwrite, progress)


def resumed_config(cfg: TrainConfig | None, run_dir: Path) -> TrainConfig:
    """The saved config of `run_dir`; ConfigError if `cfg` is given and differs from it."""
    saved = load_config(run_dir / CONFIG_FILE)
    if cfg is not None and config_differences(saved, cfg):
        keys = ", ".join(config_differences(saved, cfg))
        raise ConfigError(f"--resume {run_dir}: its saved config differs in {keys}; drop the overrides")
    return saved


def start_distributed(plan: RunPlan, run_dir: str | Path | None) -> DistributedContext:
    """Under torchrun, this process's rank in the group (the process group started on the plan's
    device: nccl on GPUs, gloo on the CPU); outside it, the one-process context."""
    ddp = setup_distributed(plan.device.type == "cuda")
    if ddp.enabled:
        if run_dir is None:
            raise ConfigError("under torchrun every rank must write to one run directory: pass --out RUN_DIR")
        if plan.cfg.batch_size % ddp.world_size:
            raise ConfigError(
                f"batch_size {plan.cfg.batch_size} must divide among the {ddp.world_size} processes"
            )
    return ddp


def train_owned(
    plan: RunPlan, run_dir: str | Path | None, resume: bool, overwrite: bool, progress: bool
) -> TrainResult:
    """The body of `train`, run while this process owns `run_dir`: the run built from `plan`, trained."""
    cfg = plan.cfg
    ddp = start_distributed(plan, run_dir)
    run = build_run(plan, Path(run_dir) if run_dir else new_run_dir(cfg), resume, overwrite, ddp)
    if ddp.is_main and progress:
        print(f"dataset: {cfg.dataset}, {run.data.counts()}", file=sys.stderr)
        print(f"{data_line(run)}; {run.threads.line()}", file=sys.stderr)
    elif ddp.world_size > 1 and progress:  # each rank chose its own count: every rank says it
        print(f"rank {ddp.rank}: {run.threads.line()}", file=sys.stderr)
    if run.checkpoint is None and cfg.eval_every:  # every rank evaluates its shard of the test set
        row = {"epoch": 0, "step": 0, **evaluation_row(run)}  # the model at initialisation
        if ddp.is_main:
            run.log.append(row)
            run.trackers.log_epoch(0, row)
    elif run.checkpoint is None and cfg.track and ddp.is_main:  # no step-0 evaluation: the trackers alone
        track_step(run, 0, 0)
    total = cfg.epochs * run.steps_per_epoch
    done = run.state.epoch * run.steps_per_epoch + run.state.step
    bar = tqdm(
        total=total,
        initial=done,
        disable=not progress or not ddp.is_main,
        unit="step",
        dynamic_ncols=True,
        mininterval=0.5,
    )
    # impulse's peaked maps leave subnormal floats, slow on some CPUs: flushed in each of the run's threads
    flush = run.device.type == "cpu" and cfg.flush_denormal
    with bar, stop_at_step_boundary() as stop, denormals_flushed(flush):
        for epoch in range(run.state.epoch, cfg.epochs):
            train_epoch(run, epoch, bar, stop)
            end_epoch(run, epoch, stop)
    run.trackers.log_attention("attention/trained", run.model, run.track_images, total)
    run.trackers.close()
    rows = run.log.rows()
    if ddp.is_main:
        atomic_write_text(run.run_dir / "finished.json", json.dumps(rows[-1], indent=1))
    held_out = run.data.evaluated_on == "validation"
    return TrainResult(run.run_dir, run.model, rows, held_out, still_learning(rows, cfg.epochs))


STILL_LEARNING = 0.05  # a training loss that fell by more than this share over the run's last tenth


def still_learning(rows: list[dict[str, Any]], epochs: int) -> str | None:
    """One line when the run ended while still learning (its training loss fell by more than 5 % over
    its last tenth, as the results page reads `late_loss_change`), with the epochs that would help."""
    change = loss_change_at_end(rows)
    if change is None or change[2] <= 0 or change[0] > -STILL_LEARNING * change[2]:
        return None
    fall, over, _ = change
    fit = rows[-1].get("fit_acc")
    fits = f", it fits {fit:.1f} % of its training images" if isinstance(fit, (int, float)) else ""
    return (
        f"the run ended still learning: its training loss fell {-fall / change[2]:.0%} over its last {over} "
        f"of {epochs} epochs{fits}; a run of epochs={2 * epochs} would likely learn more"
    )


def data_line(run: Run) -> str:
    """Where the run's images are, in words: held in memory (a CPU run), held on the accelerator, or
    decoded per batch from disk (streamed), and why."""
    data = run.data
    if data.mode == "stream":
        return f"data: streamed, decoded per batch by worker processes ({data.reason})"
    loaders = (data.train, data.test)
    images = sum(len(loader.labels) for loader in loaders)
    size = sum(loader.images.numel() * loader.images.element_size() for loader in loaders) / 2**30
    evaluated = f"{images - data.train_size:,} {data.evaluated_on}"
    counts = f"{images:,} images ({data.train_size:,} training, {evaluated})"
    if run.device.type == "cpu":
        return f"data: {counts} held in memory ({size:.2f} GiB), decoded once"
    return f"data: {counts} held on {run.device} ({size:.2f} GiB; {data.reason})"


def train_epoch(run: Run, epoch: int, bar: tqdm, stop: dict[str, int | None]) -> None:
    """The steps of one epoch (from where an interrupted run stopped), reading the device every
    `log_every` steps and after its last step (the bar shows the loss on runs of any length); a signal
    stops the run at the next step boundary with a checkpoint."""
    first = run.state.step if epoch == run.state.epoch else 0
    if run.ddp.enabled:
        seed_rank_epoch(run.cfg.seed, run.ddp.rank, epoch)
    run.data.train.set_epoch(epoch)
    run.data.train.start_batch = first
    run.parts.net.train()
    tic = time.perf_counter()
    reported = True  # a resumed epoch with no step left has nothing new to show
    for step, (images, labels) in enumerate(run.data.train, start=first):
        with explain_compile_failure(run.cfg.compile):
            train_step(run.parts, run.state.totals, images, labels, epoch * run.steps_per_epoch + step)
        bar.update(1)
        if run.ddp.is_main and track_due(
            run.cfg.track, run.cfg.track_every, epoch * run.steps_per_epoch + step + 1
        ):
            track_step(run, epoch, epoch * run.steps_per_epoch + step + 1)
        reported = (step + 1) % run.cfg.log_every == 0
        if reported:
            report_progress(run, epoch, step, bar, run.state.seconds + time.perf_counter() - tic)
        # under DDP ranks see signals at different steps, so they stop together at the epoch end
        if stop["signum"] is not None and step + 1 < run.steps_per_epoch and not run.ddp.enabled:
            run.state.epoch, run.state.step = epoch, step + 1
            run.state.seconds += time.perf_counter() - tic
            check_nonfinite(run, run.state.totals.read())
            path = save_checkpoint(
                run.run_dir, run.model, run.state.state_dict(), epoch, step + 1, ema=run.parts.ema
            )
            stopped(run, path, stop["signum"])
    if not reported:  # an epoch shorter than log_every, or its last steps: the bar shows the loss anyway
        report_progress(run, epoch, step, bar, run.state.seconds + time.perf_counter() - tic, refresh=True)
    if run.device.type == "cuda":
        torch.cuda.synchronize()
    run.state.seconds += time.perf_counter() - tic


def track_step(run: Run, epoch: int, step: int) -> None:
    """The trackers between evaluations (`track_every`), into track.jsonl and the step loggers."""
    values = run_trackers(run.model, run.cfg.track, run.track_images)
    run.parts.net.train()
    TrackLog(run.run_dir).append({"epoch": epoch, "step": step, **values})
    run.trackers.log_step(step, values)


def report_progress(
    run: Run, epoch: int, step: int, bar: tqdm, seconds: float, refresh: bool = False
) -> None:
    """One read of the running totals: the non-finite policy, the progress bar (redrawn now with
    `refresh`, else at its next update) and the step loggers."""
    totals = check_nonfinite(run, run.state.totals.read())
    seen = max(totals["seen"], 1)
    values = {
        "loss": totals["loss"] / seen,
        "lr": run.parts.optimizer.param_groups[0]["lr"],
        "images_per_s": totals["seen"] / max(seconds, 1e-9),
    }
    bar.set_postfix(
        epoch=f"{epoch + 1}/{run.cfg.epochs}",
        loss=f"{values['loss']:.3f}",
        train_acc=f"{100 * totals['correct'] / seen:.1f}",  # this epoch's training batches, not the test set
        img_s=f"{values['images_per_s']:.0f}",
        refresh=refresh,
    )
    run.trackers.log_step(epoch * run.steps_per_epoch + step + 1, values)


def check_nonfinite(run: Run, totals: dict[str, Any]) -> dict[str, Any]:
    """`on_nonfinite`: stop on any skipped step, or once more than `max_nonfinite_skips` were skipped."""
    skipped, cfg = totals["skipped"], run.cfg
    if skipped and (cfg.on_nonfinite == "stop" or skipped > cfg.max_nonfinite_skips):
        raise diverged(run, totals["first_bad"], skipped)
    return totals


def diverged(run: Run, first_bad: int, skipped: int) -> Exception:
    cfg = run.cfg
    epoch, step = divmod(max(first_bad, 0), run.steps_per_epoch)
    last = latest_checkpoint(run.run_dir)
    where = f"last good checkpoint {last}" if last else "no checkpoint yet"
    limit = f" ({skipped} non-finite steps, over max_nonfinite_skips)" if cfg.on_nonfinite == "skip" else ""
    return TrainingDiverged(
        f"non-finite loss or gradient at epoch {epoch + 1} step {step + 1}{limit}; {where}; likely causes: "
        f"lr too high (lr={cfg.lr}: lower it or add warmup_epochs / clip_grad) or low precision "
        f"(precision={cfg.precision}: try precision=fp32); on_nonfinite=skip skips such steps"
    )


def evaluation_row(run: Run) -> dict[str, float]:
    """Test loss and accuracy (and the EMA's), and the trackers' figures, of the model as it is now."""
    args = (run.data.test, run.data.eval_transform, run.parts.dtype, run.parts.layout, run.ddp)
    row = dict(zip(("test_loss", "test_acc"), evaluate(run.model, *args), strict=True))
    if run.parts.ema is not None:
        row.update(zip(("ema_test_loss", "ema_test_acc"), evaluate(run.parts.ema.module, *args), strict=True))
    return {**row, **run_trackers(run.model, run.cfg.track, run.track_images)}


def fit_row(run: Run) -> dict[str, float]:
    """Loss and accuracy on the training images themselves, unaugmented, at the end: whether the run fitted
    its training set (the augmented batches' running `train_acc` cannot say; a streamed set gives none)."""
    loader = run.data.fit_loader(run.cfg.eval_batch_size)
    if loader is None or run.ddp.enabled:
        return {}
    fitted = evaluate(run.model, loader, run.data.eval_transform, run.parts.dtype, run.parts.layout)
    return dict(zip(("fit_loss", "fit_acc"), fitted, strict=True))


def end_epoch(run: Run, epoch: int, stop: dict[str, int | None]) -> None:
    """Metrics row, evaluation when due, checkpoint; a signal received during the epoch stops here."""
    cfg, totals = run.cfg, check_nonfinite(run, run.state.totals.read())
    summed = sum_across_ranks([totals["loss"], totals["correct"], totals["seen"]], run.ddp, run.device)
    loss, correct, seen = summed
    if seen == 0:  # on_nonfinite=skip skipped every step: the epoch learned nothing
        raise TrainingDiverged(
            f"every step of epoch {epoch + 1} was non-finite and skipped ({totals['skipped']} in all); the "
            f"run is not training: lower lr (lr={cfg.lr}) or add warmup_epochs / clip_grad"
        )
    row = {
        "epoch": epoch + 1,
        "step": (epoch + 1) * run.steps_per_epoch,
        "train_loss": loss / seen,
        "train_acc": 100.0 * correct / seen,
        "lr": run.parts.optimizer.param_groups[0]["lr"],
        "seconds": run.state.seconds,
        "images_per_s": seen / max(run.state.seconds, 1e-9),
    }
    if epoch + 1 == cfg.epochs or (cfg.eval_every and (epoch + 1) % cfg.eval_every == 0):
        row.update(evaluation_row(run))
    if epoch + 1 == cfg.epochs:
        row.update(fit_row(run))
    run.state.totals.new_epoch()
    run.state.epoch, run.state.step, run.state.seconds = epoch + 1, 0, 0.0
    path = None
    if run.ddp.is_main:
        run.log.append(row)
        run.trackers.log_epoch(epoch + 1, row)
        path = save_checkpoint(run.run_dir, run.model, run.state.state_dict(), epoch + 1, ema=run.parts.ema)
    barrier(run.ddp)
    if stop["signum"] is not None and epoch + 1 < cfg.epochs:
        stopped(run, path, stop["signum"])


def stopped(run: Run, checkpoint: Path | None, signum: int) -> None:
    raise RunInterrupted(signum, checkpoint)  # `stop_outside_the_loop` says how to continue


# --- one step ---


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


# --- evaluation ---


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
    flush, kernel = plan.device.type == "cpu" and plan.cfg.flush_denormal, plan.cfg.attention_kernel
    with denormals_flushed(flush), small_head_attention_enabled(kernel == "small_heads"):  # as it trained
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
