"""One way to open a run: the builder's order, written once, for training and for everything that reopens
a run folder (evaluation, export, teachers, the attention figures, the benchmarks and the GPU script).

The order fixes which random numbers each part draws, so a reopened run's model at step 0 is the one its
training started from, bit for bit:

1. `begin`: seed every generator, set the CUDA math modes and this process's thread count (the count
   the run recorded, when reopening: a sum over the same threads rounds the same way);
2. `open_data`: the data source, from the plan's `DataRecipe`;
3. `open_model`: the model, from the plan's `ModelSpec` on the data's shape, in the plan's memory layout
   (the init's trial forward and its measurements run in the layout training uses);
4. `initialize_model`: the plan's `InitSpec`, fitted on and measured with `init_images`.

`build_run` (convinit.train.run_builder) takes these steps for a training run; `open_run` takes them for
a run folder that exists, then loads its newest checkpoint or replays its init.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel

from convinit.config import TrainConfig, load_config
from convinit.data.source import HELD_APART, INIT_BATCH, DataSource, build_data
from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.init.measure import HELD_OUT
from convinit.init.registry import InitSpec
from convinit.runs.checkpoint import latest_checkpoint, load_train_state, load_weights
from convinit.runs.ownership import reading_checkpoints
from convinit.runs.preprocessing_record import data_record, read_data_record
from convinit.runs.run_dir import CONFIG_FILE, refuse_if_all_damaged
from convinit.train.plan import DataShape, RunPlan, resolve_plan
from convinit.train.process import ThreadChoice, configure_cuda_math, seed_everything, set_run_threads

FITTED = INIT_BATCH - round(HELD_OUT * INIT_BATCH)  # 48: the images a scheme fits on, as ever


def begin(
    plan: RunPlan, run_dir: Path, resume: bool, rank: int = 0, deterministic: bool | None = None
) -> ThreadChoice:
    """Step 1: seeds, CUDA math, threads. `deterministic` overrides the config's (a reopened run is read,
    not trained: it leaves torch's deterministic mode as the caller had it)."""
    cfg = plan.cfg
    seed_everything(cfg.seed, cfg.deterministic if deterministic is None else deterministic, rank)
    configure_cuda_math(cfg, plan.device)
    return set_run_threads(cfg.threads, run_dir, resume, rank=rank)


def open_data(plan: RunPlan, rank: int = 0, world_size: int = 1) -> DataSource:
    """Step 2: the run's data source on the plan's device."""
    return build_data(plan.data, plan.device, rank, world_size)


def open_model(plan: RunPlan, shape: DataShape) -> nn.Module:
    """Step 3: the plan's model for data of `shape`, in the layout of the input batches (the 4-D conv
    weights follow it from the init on)."""
    model = plan.model_for(shape).build()
    if plan.cfg.channels_last:
        model.to(memory_format=plan.layout)
    return model


def init_images(data: DataSource) -> torch.Tensor:
    """What a run's init fits on and is measured with: the 64 training images of `init_batch` (whose
    first 48 are fitted on), then HELD_APART more, all held apart (see `initialize_model`)."""
    return data.init_batch(INIT_BATCH, extra=HELD_APART - (INIT_BATCH - FITTED))


def initialize_model(spec: InitSpec, model: nn.Module, images: torch.Tensor | None = None) -> dict[str, Any]:
    """Step 4: the init scheme (fitted on and measured with real `images`); ConfigError if its options
    are impossible. Of more than INIT_BATCH images (`init_images`), a scheme that takes `held_out` holds
    apart all but the first FITTED, unless the options set it."""
    options = dict(spec.options)
    if images is not None and len(images) > INIT_BATCH and spec.accepts("held_out"):
        options.setdefault("held_out", (len(images) - FITTED) / len(images))
    return initialize(model, spec.scheme, images=images, **options)  # a failure: one ConfigError line


@dataclass
class OpenedRun:
    """A run folder reopened: its config and plan, what its data was, and its model."""

    run_dir: Path
    plan: RunPlan
    record: dict[str, Any]  # preprocessing.json: classes, shape, normalisation, how images are read
    data: DataSource | None  # None when opened without its data (export, teachers)
    model: nn.Module  # an AveragedModel holding the EMA weights when opened with ema=True
    checkpoint: Path | None = None  # the checkpoint loaded, if any
    epoch: int | None = None  # its epoch
    init_images: torch.Tensor | None = None  # at="init": the images the init fitted on and measured with
    init_report: dict[str, Any] | None = None

    @property
    def cfg(self) -> TrainConfig:
        return self.plan.cfg


def require_run_dir(run_dir: Path) -> None:
    """A one-line ConfigError, naming what to pass instead, for a folder that holds no run."""
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(
            f"{run_dir} is not a run directory (no config.yaml); pass the folder `convinit train` wrote"
        )


def saved_config(run_dir: Path) -> TrainConfig:
    """`RUN_DIR/config.yaml` (see `require_run_dir`)."""
    require_run_dir(run_dir)
    return load_config(run_dir / CONFIG_FILE)


def record_shape(record: dict[str, Any]) -> DataShape:
    size = record["img_size"]
    return DataShape(
        len(record["classes"]), record["in_chans"], tuple(size) if isinstance(size, list) else size
    )


def open_run(
    run_dir: str | Path,
    device: torch.device | str = "cpu",
    at: Literal["checkpoint", "init"] = "checkpoint",
    ema: bool = False,
    data: bool = True,
    settle: bool = False,
) -> OpenedRun:
    """`run_dir` reopened in the builder's order on `device`: at its newest intact checkpoint (`ema`: its
    EMA weights), or at step 0 with its init replayed on the same images (needs the data). Without
    `data`, the shape and classes come from the run's preprocessing record (a run that has none reads
    its data once to make one). `settle` takes step 1, seeding the generators and setting this process's
    threads as the run did: needed to replay the init (always taken at="init") and for sums that round as
    the run's did (evaluation); by default a checkpoint is opened without it, leaving the caller's
    generators unseeded and its threads as they are (export, a teacher inside another run)."""
    run_dir = Path(run_dir)
    plan = resolve_plan(saved_config(run_dir), torch.device(device))
    if settle or at == "init":
        begin(plan, run_dir, resume=True, deterministic=False)
    source = open_data(plan) if data or at == "init" else None
    record = read_data_record(run_dir)
    if record is None:  # a run written before the record existed
        record = data_record(source if source is not None else open_data(plan))
    shape = record_shape(record) if source is None else source_shape(source)
    plan = plan.on_data(shape)  # an unread set's plan, on the shape the run's data has
    model = open_model(plan, shape)
    opened = OpenedRun(run_dir, plan, record, source, model)
    if at == "init":
        opened.init_images = init_images(source)
        opened.init_report = initialize_model(plan.init, model, opened.init_images)
        return opened
    load_newest(opened, ema)
    opened.model.to(plan.device)
    return opened


def source_shape(data: DataSource) -> DataShape:
    return DataShape(data.num_classes, data.in_chans, data.img_size)


def load_newest(opened: OpenedRun, ema: bool) -> None:
    """The newest intact checkpoint's weights (or its EMA's) into the opened model, read while no
    training run may prune it; ConfigError when there is none."""
    run_dir = opened.run_dir
    target = AveragedModel(opened.model, use_buffers=True) if ema else opened.model
    with reading_checkpoints(run_dir):
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            refuse_if_all_damaged(run_dir)  # damaged ones: each named in one line
            raise ConfigError(f"{run_dir} holds no intact checkpoint yet; train it first")
        if ema and not (checkpoint / "ema.safetensors").exists():
            raise ConfigError(f"{run_dir} was trained without EMA (ema_decay); drop --ema")
        load_weights(target, checkpoint, ema=ema)
        opened.epoch = int(math.floor(load_train_state(checkpoint)["epoch"]))
    opened.model, opened.checkpoint = target, checkpoint
