"""Everything a run is made of, built in one place from its plan: data source, model, optimiser,
schedule, loss scaler, EMA, metrics log and trackers, restored from a checkpoint when resuming.

The plan (`convinit.train.plan`, made by `validate`) has already resolved the device, the number
formats, the data's shape and the model's arguments. `build_run` reads as the run's setup, one call a
step, in the order that fixes which random numbers each part draws (a resumed run and a kept run
reproduce because of it):

1. check the teacher (before any folder is touched);
2. `begin`: seed every generator, set the CUDA math and the thread count;
3. `open_data`: the data source;
4. `prepare_folder`: the run folder prepared and its config written (a new run), or its checkpoint found;
5. `open_model`: the model, built once from the plan's `ModelSpec`;
6. `initialize_fresh`: its init on real images (a fresh run), or the init's report read back;
7. `step_parts`: optimiser, schedule, scaler, EMA, and the teacher, opened after the init;
8. `restore` from the checkpoint, or `start_fresh`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from convinit.analysis.augmentation_preview import save_augmentation_preview
from convinit.analysis.init_summary import read_init_report
from convinit.config import TrainConfig, save_config, say_notes, say_once
from convinit.data.source import DataSource
from convinit.errors import ConfigError
from convinit.runs.checkpoint import latest_checkpoint, load_train_state, load_weights
from convinit.runs.metrics import MetricsLog
from convinit.runs.preprocessing_record import read_data_record, write_data_record
from convinit.runs.provenance import provenance
from convinit.runs.run_dir import CONFIG_FILE, prepare_run_dir, refuse_if_all_damaged
from convinit.runs.track_log import TrackLog
from convinit.system.atomic import atomic_write_text
from convinit.train.loggers import Trackers
from convinit.train.opening import begin, init_images, initialize_model, open_data, open_model, source_shape
from convinit.train.plan import DataShape, RunPlan, recipe_note
from convinit.train.process import DistributedContext, ThreadChoice, barrier, record_threads, set_run_threads
from convinit.train.step_parts import StepParts, StepTotals, TrainState, check_teacher, step_parts
from convinit.train.validation import check_model

TRACK_BATCH = 256  # images of the test set on which trackers (non-locality, gates) are evaluated


@dataclass
class Run:
    """A run ready to train: what the epoch loop reads and moves."""

    plan: RunPlan
    run_dir: Path
    ddp: DistributedContext
    data: DataSource
    model: nn.Module
    parts: StepParts
    state: TrainState
    log: MetricsLog
    trackers: Trackers
    track_images: torch.Tensor
    checkpoint: Path | None  # the checkpoint resumed from, if any
    threads: ThreadChoice | None = None  # torch's thread count in this process, and why

    @property
    def cfg(self) -> TrainConfig:
        return self.plan.cfg

    @property
    def device(self) -> torch.device:
        return self.plan.device

    @cached_property
    def steps_per_epoch(self) -> int:
        """The same for every epoch; measured once, since a loader's length computes its epoch order
        (with repeated augmentation, or streamed, that is a pass over the whole training set)."""
        return len(self.data.train)


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
def check_forward(plan: RunPlan, model: nn.Module, images: torch.Tensor, num_classes: int) -> None:
    """One forward pass on real images before any step, in the plan's number formats: a model that
    builds but cannot run on this data (an argument of the right type but an impossible value) fails
    with one line, not a traceback."""
    model.eval()
    cfg, dtype = plan.cfg, plan.dtype
    images = images.contiguous(memory_format=plan.layout)
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


def initialize_fresh(
    plan: RunPlan, model: nn.Module, data: DataSource, run_dir: Path, fresh: bool, is_main: bool
) -> None:
    """The init, for a fresh run (a new one, or one killed before its first intact checkpoint: it starts
    over), written to `init_report.json`; a resumed run reads that report back instead, since trackers
    compare with the init's targets (None, with a warning, when it is damaged)."""
    if fresh:
        report = initialize_model(plan.init, model, init_images(data))
        model.init_report = report
        if is_main:
            atomic_write_text(run_dir / "init_report.json", json.dumps(report, indent=1, default=str))
    elif (run_dir / "init_report.json").is_file():
        model.init_report = read_init_report(run_dir)


def settled_on_data(plan: RunPlan, shape: DataShape, run_dir: Path, resume: bool, is_main: bool) -> RunPlan:
    """`plan` on the data's shape; a new run that got the recommended recipe says in one line whether its
    model took it, and one that refused it saves the config it trains (`recommended: none`)."""
    planned = plan.on_data(shape)
    if not resume and is_main and plan.cfg.recommended == "applied":
        say_once(recipe_note(planned))
        say_notes()
        if planned.cfg is not plan.cfg:
            save_config(planned.cfg, run_dir / CONFIG_FILE)
    return planned


def build_run(plan: RunPlan, run_dir: Path, resume: bool, overwrite: bool, ddp: DistributedContext) -> Run:
    """Every part of the run `plan` (already validated) describes, in the one order that fixes which random
    numbers each part draws, restored from its newest intact checkpoint when resuming. Every check that can
    refuse comes before the folder is emptied (--overwrite) or written."""
    threads = begin(plan, run_dir, resume, ddp.rank)  # seeds, CUDA math, threads
    data = open_data(plan, ddp.rank, ddp.world_size)
    if not resume:  # the checks that needed the data's shape, before the folder is touched
        check_teacher(plan.cfg.teacher, plan.shape or source_shape(data))
        if plan.model is None:  # the model waited for the data (a folder): validate's model checks, on it
            check_model(plan.on_data(source_shape(data)))
    plan, checkpoint, threads = prepare_folder(plan, data, run_dir, resume, overwrite, ddp, threads)
    model = open_model(plan, source_shape(data))
    initialize_fresh(plan, model, data, run_dir, checkpoint is None, ddp.is_main)
    model.to(plan.device)  # keeps the layout
    parts = step_parts(plan, data, model, ddp)  # optimiser, schedule, EMA, and the teacher after the init
    track_images = data.test_batch(TRACK_BATCH, plan.device)
    check_forward(plan, model, track_images[:2], data.num_classes)
    state = TrainState(parts.optimizer, parts.scheduler, parts.scaler, StepTotals(plan.device))
    log = MetricsLog(run_dir)
    trackers = Trackers(plan.cfg.logger if ddp.is_main else [], run_dir, plan.cfg.to_dict())
    run = Run(plan, run_dir, ddp, data, model, parts, state, log, trackers, track_images, checkpoint, threads)
    if checkpoint is not None:
        restore(run, checkpoint)
    else:
        start_fresh(run, workers_of(data))
    return run


def workers_of(data: DataSource) -> int:
    """The decoding processes of a streamed training set (0 for data on the device): they share the cores."""
    return getattr(data.train, "num_workers", 0)


def prepare_folder(
    plan: RunPlan,
    data: DataSource,
    run_dir: Path,
    resume: bool,
    overwrite: bool,
    ddp: DistributedContext,
    threads: ThreadChoice,
) -> tuple[RunPlan, Path | None, ThreadChoice]:
    """The run folder, once the data is read: a new run's folder prepared and its config, provenance and
    data record written; a resumed run's newest intact checkpoint found. Returns the plan settled on the
    data's shape, that checkpoint (None: start fresh) and the thread count, less the decoding workers."""
    cfg = plan.cfg
    if not resume and ddp.is_main:
        prepare_run_dir(run_dir, overwrite)
        save_config(cfg, run_dir / CONFIG_FILE)
        atomic_write_text(run_dir / "provenance.json", json.dumps(provenance(), indent=1))
    barrier(ddp)
    if plan.shape is None:  # an unread set: the model is planned on the shape read, the recipe checked on it
        plan = settled_on_data(plan, source_shape(data), run_dir, resume, ddp.is_main)
    if workers_of(data):
        threads = set_run_threads(plan.cfg.threads, run_dir, resume, workers_of(data), ddp.rank)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        refuse_if_all_damaged(run_dir)
    if ddp.is_main and (checkpoint is None or read_data_record(run_dir) is None):
        write_data_record(run_dir, data)  # what export and predict use: the run's own input
    return plan, checkpoint, threads


def start_fresh(run: Run, workers: int) -> None:
    """A run starting at step 0: its thread record, rows a killed attempt wrote before its first checkpoint
    dropped, and the trackers' first entries (init report, augmentations, attention at init)."""
    record_threads(run.run_dir, run.threads, run.ddp.rank, workers)  # each rank its own; a resume reads it
    if not run.ddp.is_main:
        return
    run.log.truncate_after(-1)
    TrackLog(run.run_dir).truncate_after(-1)
    run.trackers.log_init(run.model.init_report)
    grid = save_augmentation_preview(run.data, run.cfg.seed, run.run_dir / "augmentations.png")
    run.trackers.log_image("augmentations", grid, 0)
    run.trackers.log_attention("attention/init", run.model, run.track_images, 0)


@contextmanager
def explain_malformed_state(checkpoint: Path) -> Iterator[None]:
    """A train_state.pt that loads safely but lacks what a resume needs ends in one line."""
    try:
        yield
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise ConfigError(
            f"{checkpoint / 'train_state.pt'} cannot be resumed from ({type(exc).__name__}: {detail}); it "
            f"was not written by this convinit: delete {checkpoint} to resume from the previous checkpoint"
        ) from exc


def restore(run: Run, checkpoint: Path) -> None:
    """Weights, EMA and train state from `checkpoint`; the metrics log back to its epoch."""
    load_weights(run.model, checkpoint)
    if run.parts.ema is not None:
        load_weights(run.parts.ema, checkpoint, ema=True)
    state: dict[str, Any] = load_train_state(checkpoint)
    with explain_malformed_state(checkpoint):
        run.state.load_state_dict(state)
    if run.ddp.is_main:
        run.log.truncate_after(run.state.epoch)
        TrackLog(run.run_dir).truncate_after(run.state.epoch * run.steps_per_epoch + run.state.step)
