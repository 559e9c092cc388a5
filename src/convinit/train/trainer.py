"""The training loop: a plain function you can read in one screen, with the data on the device.

`train(cfg)` builds everything from a validated `TrainConfig`, trains with a progress bar, evaluates
every epoch, logs `metrics.jsonl`/`metrics.csv`, and checkpoints each epoch end and on Ctrl-C.
`train(cfg, run_dir, resume=True)` continues a run from its newest intact checkpoint: data order is a
function of (seed, epoch) and every RNG is restored, so the continuation sees the same batches.
"""

from __future__ import annotations

import json
import math
import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm.auto import tqdm

from convinit.analysis.init_maps import init_images
from convinit.config import TrainConfig, config_differences, load_config, save_config
from convinit.data import BatchAugment, DeviceLoader, ImageDataset, MixupCutmix, check_available, load_dataset
from convinit.data.subsets import stratified_subset
from convinit.errors import ConfigError, TrainingDiverged
from convinit.init import initialize
from convinit.models import create_model
from convinit.train.checkpoint import latest_checkpoint, load_train_state, load_weights, save_checkpoint
from convinit.train.distributed import barrier, setup_distributed, sum_across_ranks
from convinit.train.loggers import Trackers, check_loggers
from convinit.train.metrics import MetricsLog
from convinit.train.optim import build_optimizer, build_scheduler

TRACK_BATCH = 256  # images of the test set on which trackers (non-locality, gates) are evaluated


class RunInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT/SIGTERM after writing a checkpoint at a step boundary."""

    def __init__(self, signum: int, checkpoint: Path):
        super().__init__(f"stopped by signal {signum}; checkpoint {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint


@contextmanager
def stop_at_step_boundary() -> Iterator[dict[str, int | None]]:
    """SIGINT/SIGTERM set a flag that the loop checks after each step; a second Ctrl-C stops at once."""
    flag: dict[str, int | None] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def request_stop(signum: int, frame: Any) -> None:
        flag["signum"] = signum
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class TrainingRun:
    run_dir: Path
    model: nn.Module
    metrics: list[dict[str, Any]]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for but CUDA is not available here; use device=cpu or auto")
    if name.startswith("mps") and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} asked for but MPS is not available here; use device=cpu or auto")
    try:
        device = torch.device(name)
    except RuntimeError as exc:  # e.g. cuda:x
        raise ConfigError(
            f"device {name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps"
        ) from exc
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(
            f"device {name!r} asked for but there are {count} CUDA devices (cuda:0 .. cuda:{count - 1})"
        )
    return device


def autocast_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, None for full precision: `auto` is bf16 on CUDA and fp32 elsewhere; bf16 and
    fp16 are used on any device (fp16 needs a GradScaler, see `train`)."""
    if cfg.precision == "fp16":
        return torch.float16
    if cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def memory_format(cfg: TrainConfig) -> torch.memory_format:
    """channels_last stores a (B, C, H, W) batch as (B, H, W, C), the layout fast convolution kernels
    want (ConvMixer); the weights of a ViT are mostly 2-D and unaffected."""
    return torch.channels_last if cfg.channels_last else torch.contiguous_format


@contextmanager
def explain_compile_failure(enabled: bool) -> Iterator[None]:
    """torch.compile compiles lazily, in the first forward and backward: a failure there (no C++
    compiler, an op the backend cannot lower) ends with one line that names the way out."""
    if not enabled:
        yield
        return
    try:
        yield
    except torch._dynamo.exc.TorchDynamoException as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if lines else ""
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        raise ConfigError(
            f"torch.compile failed ({type(exc).__name__}: {detail}); set compile=false to train without it"
        ) from exc


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2])},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    keys = state["numpy"]["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def prepare_data(cfg: TrainConfig) -> tuple[ImageDataset, torch.Tensor]:
    """The dataset and the indices of the training images this run uses (a stratified subset or all)."""
    dataset = load_dataset(cfg.dataset, cfg.data_dir, cfg.download)
    keep = stratified_subset(
        dataset.train_labels, cfg.train_fraction, cfg.per_class, cfg.seed, cfg.subset_order
    )
    return dataset, keep


def dataset_shape(cfg: TrainConfig) -> dict[str, Any] | None:
    """num_classes / in_chans / img_size of the configured dataset without reading it, where known."""
    known = {
        "digits": (10, 1, 8),
        "mnist": (10, 1, 28),
        "fashion-mnist": (10, 1, 28),
        "cifar10": (10, 3, 32),
        "cifar100": (100, 3, 32),
        "svhn": (10, 3, 32),
        "tiny-imagenet": (200, 3, 64),
    }
    if cfg.dataset not in known:
        return None
    classes, chans, size = known[cfg.dataset]
    return {"num_classes": classes, "in_chans": chans, "img_size": cfg.img_size or size}


def build_model(
    cfg: TrainConfig, num_classes: int, in_chans: int, img_size: int | tuple[int, int]
) -> nn.Module:
    """The configured model; ConfigError if its arguments are unknown or impossible for this data."""
    try:
        return create_model(
            cfg.model, num_classes=num_classes, img_size=img_size, in_chans=in_chans, **cfg.model_args
        )
    except ConfigError:
        raise
    except (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError) as exc:  # 0 ** -0.5: dim=0
        detail = " ".join(str(exc).split())
        raise ConfigError(f"model {cfg.model!r} cannot be built with {cfg.model_args}: {detail}") from exc


def initialize_model(
    cfg: TrainConfig, model: nn.Module, images: torch.Tensor | None = None
) -> dict[str, Any]:
    """Apply the configured init scheme (fitted on and measured with real `images`); ConfigError if its
    options are unknown or impossible."""
    try:
        return initialize(model, cfg.init, images=images, **cfg.init_args)
    except ConfigError:
        raise
    except (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError) as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"init {cfg.init!r} cannot be applied with {cfg.init_args}: {detail}") from exc


# what a model that builds but cannot run on given images raises (see check_forward)
FORWARD_ERRORS = (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError, IndexError)


def runs_in_fp32(model: nn.Module, images: torch.Tensor) -> bool:
    """Whether the forward pass works without autocast: tells a dtype problem from a shape problem."""
    try:
        model(images)
    except FORWARD_ERRORS:
        return False
    return True


@torch.no_grad()
def check_forward(cfg: TrainConfig, model: nn.Module, images: torch.Tensor, num_classes: int) -> None:
    """One forward pass on real images before any step: a model that builds but cannot run on this
    data (an argument of the right type but an impossible value) fails with one line, not a traceback."""
    model.eval()
    dtype = autocast_dtype(cfg, images.device)
    images = images.contiguous(memory_format=memory_format(cfg))
    try:
        with torch.autocast(images.device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(images)
    except ConfigError:
        raise
    except FORWARD_ERRORS as exc:
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 300 else detail[:297] + "..."  # torch's signature listings
        if dtype is not None and runs_in_fp32(model, images):  # an op with no kernel for this dtype
            raise ConfigError(
                f"model {cfg.model!r} runs in fp32 but not under precision={cfg.precision} autocast on "
                f"{images.device.type}: {detail}; use precision=fp32"
            ) from exc
        shape = "x".join(str(n) for n in images.shape[1:])
        raise ConfigError(
            f"model {cfg.model!r} with {cfg.model_args} cannot run on {shape} images: {detail}"
        ) from exc
    if tuple(logits.shape) != (len(images), num_classes):
        raise ConfigError(
            f"model {cfg.model!r} with {cfg.model_args} returns {tuple(logits.shape)} for "
            f"{len(images)} images of {num_classes} classes; it must return (batch, num_classes)"
        )


def load_teacher(cfg: TrainConfig, num_classes: int, device: torch.device) -> nn.Module | None:
    """The frozen teacher for hard distillation: a training run (newest checkpoint) or a saved model."""
    if cfg.teacher is None:
        return None
    path = Path(cfg.teacher)
    if (path / "config.yaml").is_file():
        from convinit.train.export import export_run

        teacher = export_run(path)
    else:
        from convinit.models.pretrained import from_pretrained

        teacher = from_pretrained(path)
    classes = teacher.model_kwargs["num_classes"]
    if classes != num_classes:
        raise ConfigError(f"teacher {path} predicts {classes} classes but {cfg.dataset} has {num_classes}")
    for param in teacher.parameters():
        param.requires_grad_(False)
    return teacher.eval().to(device)


def validate(cfg: TrainConfig) -> None:
    """Every check that can run before any data is read or any step taken (one-line errors)."""
    resolve_device(cfg.device)
    if cfg.teacher is not None:
        path = Path(cfg.teacher)
        if not ((path / "config.yaml").is_file() or (path / "config.json").is_file()):
            raise ConfigError(
                f"teacher {path} is neither a run directory nor a saved model (convinit export)"
            )
    check_available(cfg.dataset, cfg.data_dir, cfg.download)
    shape = dataset_shape(cfg)
    if shape is not None:
        try:  # on the meta device: checks shapes and arguments without allocating weights
            with torch.device("meta"):
                create_model(cfg.model, **shape, **cfg.model_args)
        except ConfigError:
            raise
        except Exception:  # an init that needs real values (e.g. fixed filters): build it for real
            build_model(cfg, **shape)
    check_loggers(cfg.logger)
    if cfg.track:
        from convinit.analysis import get_tracker

        for name in cfg.track:
            get_tracker(name)


def new_run_dir(cfg: TrainConfig, out_dir: str | Path = "runs") -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(out_dir) / f"{cfg.model}-{cfg.dataset}-s{cfg.seed}-{stamp}"


def prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    if (run_dir / "finished.json").exists() and not overwrite:
        raise ConfigError(f"{run_dir} already holds a finished run; choose another --out or pass --overwrite")
    if overwrite:
        for name in ("metrics.jsonl", "metrics.csv", "finished.json", "init_report.json"):
            (run_dir / name).unlink(missing_ok=True)
        import shutil

        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: DeviceLoader,
    transform: nn.Module,
    dtype: torch.dtype | None,
    layout: torch.memory_format = torch.contiguous_format,
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (%) over the loader, in the training run's precision and layout."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for images, labels in loader:
        with torch.autocast(labels.device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(transform(images).contiguous(memory_format=layout))
        total_loss += F.cross_entropy(logits.float(), labels, reduction="sum").item()
        correct += (logits.argmax(dim=1) == labels).sum().item()
        count += len(labels)
    return total_loss / count, 100.0 * correct / count


@torch.no_grad()
def run_trackers(model: nn.Module, names: list[str], images: torch.Tensor) -> dict[str, float]:
    if not names:
        return {}
    from convinit.analysis import get_tracker

    model.eval()
    values: dict[str, float] = {}
    for name in names:
        values.update(get_tracker(name)(model, images))
    return values


def diverged(
    cfg: TrainConfig, run_dir: Path, epoch: int, step: int, loss: torch.Tensor, skipped: int
) -> Exception:
    what = "loss" if not torch.isfinite(loss) else "gradient"
    last = latest_checkpoint(run_dir)
    where = f"last good checkpoint {last}" if last else "no checkpoint yet"
    limit = f" ({skipped} non-finite steps, over max_nonfinite_skips)" if cfg.on_nonfinite == "skip" else ""
    return TrainingDiverged(
        f"non-finite {what} at epoch {epoch + 1} step {step + 1}{limit}; {where}; likely causes: lr too "
        f"high (lr={cfg.lr}: lower it or add warmup_epochs / clip_grad) or low precision "
        f"(precision={cfg.precision}: try precision=fp32); on_nonfinite=skip skips such steps"
    )


def train(
    cfg: TrainConfig | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainingRun:
    """Train `cfg` into `run_dir` (a new timestamped folder under runs/ by default), or resume `run_dir`."""
    if resume:
        run_dir = Path(run_dir)
        saved = load_config(run_dir / "config.yaml")
        if cfg is not None and config_differences(saved, cfg):
            keys = ", ".join(config_differences(saved, cfg))
            raise ConfigError(f"--resume {run_dir}: its saved config differs in {keys}; drop the overrides")
        cfg = saved
    if cfg is None:
        raise ConfigError("train() needs a config or resume=True with a run directory")
    validate(cfg)
    device = resolve_device(cfg.device)
    ddp = setup_distributed(device.type == "cuda")
    if ddp.enabled:
        if run_dir is None:
            raise ConfigError("under torchrun every rank must write to one run directory: pass --out RUN_DIR")
        if cfg.batch_size % ddp.world_size:
            raise ConfigError(f"batch_size {cfg.batch_size} must divide among the {ddp.world_size} processes")
        if device.type == "cuda":
            device = torch.device("cuda", ddp.local_rank)
    run_dir = Path(run_dir) if run_dir is not None else new_run_dir(cfg)
    if not resume and ddp.is_main:
        prepare_run_dir(run_dir, overwrite)
        save_config(cfg, run_dir / "config.yaml")
    barrier(ddp)
    dtype = autocast_dtype(cfg, device)
    seed_everything(cfg.seed, cfg.deterministic)
    dataset, keep = prepare_data(cfg)
    img_size = cfg.img_size or dataset.img_size
    model = build_model(cfg, dataset.num_classes, dataset.in_chans, img_size)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is None:  # a new run, or one killed before its first intact checkpoint: start over
        report = initialize_model(cfg, model, init_images(dataset, keep, img_size))
        if ddp.is_main:
            init_report = report
            (run_dir / "init_report.json").write_text(json.dumps(report, indent=1, default=str))
    model.to(device)
    layout = memory_format(cfg)  # of the input batches; the model's 4-D (conv) weights follow it
    if cfg.channels_last:
        model.to(memory_format=layout)

    train_loader = DeviceLoader(
        dataset.train_images[keep],
        dataset.train_labels[keep],
        cfg.batch_size // ddp.world_size,  # the global batch is split across ranks
        device,
        shuffle=True,
        drop_last=len(keep) > cfg.batch_size or ddp.enabled,
        seed=cfg.seed,
        rank=ddp.rank,
        world_size=ddp.world_size,
    )
    test_loader = DeviceLoader(dataset.test_images, dataset.test_labels, cfg.eval_batch_size, device)
    out_size = (img_size, img_size) if isinstance(img_size, int) else img_size
    augment = BatchAugment(
        dataset.mean,
        dataset.std,
        out_size,
        train=True,
        crop_padding=cfg.crop_padding,
        hflip=cfg.hflip,
        randaugment_n=cfg.randaugment_n,
        randaugment_m=cfg.randaugment_m,
        randaugment_mstd=cfg.randaugment_mstd,
        random_erasing=cfg.random_erasing,
    ).to(device)
    eval_transform = BatchAugment(dataset.mean, dataset.std, out_size).to(device)
    mix = MixupCutmix(dataset.num_classes, cfg.mixup, cfg.cutmix)
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    teacher = load_teacher(cfg, dataset.num_classes, device)
    optimizer = build_optimizer(model, cfg)
    # fp16 needs loss scaling: small gradients would underflow to 0 (disabled, every call is a no-op)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
    steps_per_epoch = len(train_loader)
    scheduler = build_scheduler(optimizer, cfg, steps_per_epoch)
    ema = (
        AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay), use_buffers=True)
        if cfg.ema_decay
        else None
    )
    track_images = eval_transform(dataset.test_images[:TRACK_BATCH].to(device))
    check_forward(cfg, model, track_images[:2], dataset.num_classes)
    log = MetricsLog(run_dir)
    net = DistributedDataParallel(model) if ddp.enabled else model  # DDP syncs weights from rank 0
    if cfg.compile:  # after DDP, so torch's DDPOptimizer splits graphs at gradient buckets; `model`
        net = torch.compile(net)  # stays uncompiled for checkpoints, EMA and evaluation (no _orig_mod.)
    trackers = Trackers(cfg.logger if ddp.is_main else [], run_dir, cfg.to_dict())
    if checkpoint is None and ddp.is_main:
        trackers.log_init(init_report)

    start_epoch, start_step, running = 0, 0, {"loss": 0.0, "correct": 0, "seen": 0, "seconds": 0.0}
    skipped = 0  # non-finite steps skipped so far (on_nonfinite=skip), carried across resumes
    if checkpoint is not None:
        state = load_train_state(checkpoint)
        load_weights(model, checkpoint)
        if ema is not None:
            load_weights(ema, checkpoint, ema=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):  # fp16 runs only (a disabled scaler saves {})
            scaler.load_state_dict(state["scaler"])
        restore_rng_state(state["rng"])
        start_epoch, start_step, running = state["epoch"], state["step"], state["running"]
        skipped = state.get("skipped", 0)  # absent in checkpoints written before it was saved
        if ddp.is_main:
            log.truncate_after(start_epoch)
    elif ddp.is_main:
        log.truncate_after(-1)  # rows a killed attempt wrote before its first checkpoint
        if cfg.eval_every:
            test_loss, test_acc = evaluate(model, test_loader, eval_transform, dtype, layout)
            log.append(
                {
                    "epoch": 0,
                    "test_loss": test_loss,
                    "test_acc": test_acc,
                    **run_trackers(model, cfg.track, track_images),
                }
            )

    def train_state(epoch: int, step: int) -> dict[str, Any]:
        return {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "rng": rng_state(),
            "epoch": epoch,
            "step": step,
            "running": dict(running),
            "skipped": skipped,
        }

    bar = tqdm(
        total=cfg.epochs * steps_per_epoch,
        initial=start_epoch * steps_per_epoch + start_step,
        disable=not progress or not ddp.is_main,
        unit="step",
        dynamic_ncols=True,
        mininterval=0.5,
    )
    path = checkpoint  # the newest checkpoint so far (rank 0 writes new ones)
    with stop_at_step_boundary() as stop:
        for epoch in range(start_epoch, cfg.epochs):
            train_loader.set_epoch(epoch)
            net.train()
            tic = time.perf_counter()
            for step, (images, labels) in enumerate(train_loader):
                if epoch == start_epoch and step < start_step:
                    continue  # trained before the interruption
                inputs, targets = mix(augment(images), labels)
                inputs = inputs.contiguous(memory_format=layout)
                with explain_compile_failure(cfg.compile):
                    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                        logits = net(inputs)
                        loss = criterion(logits.float(), targets)
                        # DeiT's hard distillation: the teacher's argmax as a second target
                        if teacher is not None:
                            with torch.no_grad():
                                teacher_labels = teacher(inputs).argmax(dim=1)
                            distill = F.cross_entropy(logits.float(), teacher_labels)
                            loss = (1 - cfg.distill_weight) * loss + cfg.distill_weight * distill
                    optimizer.zero_grad(set_to_none=True)
                    scaler.scale(loss).backward()
                scaler.unscale_(optimizer)  # clip and check the true gradients, not the scaled ones
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad or math.inf)
                grads_finite = bool(torch.isfinite(grad_norm))
                # fp16: an overflowing gradient is the scaler's business (it skips the step and halves the
                # scale), unless the scale is already below 1: then the gradient itself is not finite
                overflow = not grads_finite and scaler.is_enabled() and scaler.get_scale() >= 1.0
                # under DDP the loss is per rank but the all-reduced gradient norm is the same everywhere
                if not ((ddp.enabled or torch.isfinite(loss)) and (grads_finite or overflow)):
                    skipped += 1
                    if cfg.on_nonfinite == "stop" or skipped > cfg.max_nonfinite_skips:
                        bar.close()
                        raise diverged(cfg, run_dir, epoch, step, loss, skipped)
                    optimizer.zero_grad(set_to_none=True)
                    scaler.update()  # ends this step's unscale_ (and lowers an fp16 scale)
                    scheduler.step()
                    bar.update(1)
                    continue
                scaler.step(optimizer)  # optimizer.step(), unless fp16 gradients overflowed
                scaler.update()
                scheduler.step()
                if ema is not None and not overflow:
                    ema.update_parameters(model)
                hard = targets.argmax(dim=1) if targets.ndim == 2 else targets
                loss_value = loss.item()
                running["loss"] += loss_value * len(labels)
                running["correct"] += (logits.argmax(dim=1) == hard).sum().item()
                running["seen"] += len(labels)
                bar.update(1)
                if trackers.loggers:
                    elapsed = running["seconds"] + time.perf_counter() - tic
                    throughput = running["seen"] / max(elapsed, 1e-9)
                    lr_now = optimizer.param_groups[0]["lr"]
                    values = {"loss": loss_value, "lr": lr_now, "images_per_s": throughput}
                    trackers.log_step(epoch * steps_per_epoch + step + 1, values)
                if bar.n % 10 == 0 or step == steps_per_epoch - 1:
                    seconds = running["seconds"] + time.perf_counter() - tic
                    bar.set_postfix(
                        epoch=f"{epoch + 1}/{cfg.epochs}",
                        loss=f"{running['loss'] / running['seen']:.3f}",
                        acc=f"{100 * running['correct'] / running['seen']:.1f}",
                        img_s=f"{running['seen'] / max(seconds, 1e-9):.0f}",
                        refresh=False,
                    )
                # under DDP ranks see signals at different steps, so they stop together at the epoch end
                if stop["signum"] is not None and step + 1 < steps_per_epoch and not ddp.enabled:
                    bar.close()
                    running["seconds"] += time.perf_counter() - tic
                    path = save_checkpoint(
                        run_dir, model, train_state(epoch, step + 1), epoch, step + 1, ema=ema
                    )
                    print(f"stopped: checkpoint {path}; continue with `convinit train --resume {run_dir}`")
                    raise RunInterrupted(stop["signum"], path)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = running["seconds"] + time.perf_counter() - tic
            totals = sum_across_ranks([running["loss"], running["correct"], running["seen"]], ddp, device)
            running.update(loss=totals[0], correct=totals[1], seen=totals[2])
            row = {
                "epoch": epoch + 1,
                "train_loss": running["loss"] / max(running["seen"], 1),
                "train_acc": 100.0 * running["correct"] / max(running["seen"], 1),
                "lr": optimizer.param_groups[0]["lr"],
                "seconds": seconds,
                "images_per_s": running["seen"] / max(seconds, 1e-9),
            }
            if epoch + 1 == cfg.epochs or (cfg.eval_every and (epoch + 1) % cfg.eval_every == 0):
                row["test_loss"], row["test_acc"] = evaluate(
                    model, test_loader, eval_transform, dtype, layout
                )
                if ema is not None:
                    row["ema_test_loss"], row["ema_test_acc"] = evaluate(
                        ema.module, test_loader, eval_transform, dtype, layout
                    )
                row.update(run_trackers(model, cfg.track, track_images))
            running = {"loss": 0.0, "correct": 0, "seen": 0, "seconds": 0.0}
            if ddp.is_main:
                log.append(row)
                trackers.log_epoch(epoch + 1, row)
                path = save_checkpoint(run_dir, model, train_state(epoch + 1, 0), epoch + 1, ema=ema)
            barrier(ddp)
            if stop["signum"] is not None and epoch + 1 < cfg.epochs:
                bar.close()
                print(f"stopped: checkpoint {path}; continue with `convinit train --resume {run_dir}`")
                raise RunInterrupted(stop["signum"], path)
    bar.close()
    trackers.close()
    rows = log.rows()
    if ddp.is_main:
        (run_dir / "finished.json").write_text(json.dumps(rows[-1], indent=1))
    return TrainingRun(run_dir=run_dir, model=model, metrics=rows)


def evaluate_run(run_dir: str | Path, ema: bool = False, device: str = "auto") -> dict[str, float]:
    """Test loss and accuracy of a run's newest intact checkpoint."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            f"{run_dir} is not a run directory (no config.yaml); pass the folder `convinit train` wrote"
        )
    cfg = load_config(run_dir / "config.yaml")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ConfigError(f"{run_dir} holds no intact checkpoint yet; train it first")
    if ema and not (checkpoint / "ema.safetensors").exists():
        raise ConfigError(f"{run_dir} was trained without EMA (ema_decay); drop --ema")
    dev = resolve_device(device)
    dataset, _ = prepare_data(cfg)
    img_size = cfg.img_size or dataset.img_size
    model = build_model(cfg, dataset.num_classes, dataset.in_chans, img_size)
    target = AveragedModel(model, use_buffers=True) if ema else model
    load_weights(target, checkpoint, ema=ema)
    target.to(dev)
    if cfg.channels_last:
        target.to(memory_format=torch.channels_last)
    out_size = (img_size, img_size) if isinstance(img_size, int) else img_size
    loader = DeviceLoader(dataset.test_images, dataset.test_labels, cfg.eval_batch_size, dev)
    transform = BatchAugment(dataset.mean, dataset.std, out_size).to(dev)
    loss, acc = evaluate(target, loader, transform, autocast_dtype(cfg, dev), memory_format(cfg))
    return {
        "checkpoint": str(checkpoint),
        "test_loss": loss,
        "test_acc": acc,
        "epoch": int(math.floor(load_train_state(checkpoint)["epoch"])),
    }
