"""The real training step of each recipe, on a pretend CUDA device: no device mismatch, and per step no
blocking host-to-device copy and no device-to-host read (each would make the GPU wait on the host).

Each case builds the run's pieces as `convinit train` does (`build_data`, `build_model`, `step_parts`)
from a shipped preset, on digits or a fabricated image folder so that it needs nothing downloaded; the
first step builds lazy state (the optimiser's moments) and is not audited, the next two are.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from convinit.config import TrainConfig, resolve_config
from convinit.data.datasets import ImageDataset, load_dataset
from convinit.data.source import DataSource, build_data
from convinit.speed.fake_cuda import CUDA, DeviceAudit, audit, describe, fake_cuda
from convinit.train.opening import open_model, source_shape
from convinit.train.plan import data_recipe, resolve_plan
from convinit.train.process import DistributedContext
from convinit.train.step_parts import StepParts, StepTotals, step_parts
from convinit.train.trainer import evaluate, train_step

AUDITED_STEPS = 2
# small models: shapes cost nothing on fake tensors, but building and initialising real-sized ones does
TINY_VIT = ["model_args.depth=1", "model_args.dim=32", "model_args.heads=2", "model_args.dim_head=16",
            "model_args.mlp_dim=64"]  # fmt: skip


def audit_steps(parts: StepParts, batches, steps: int = AUDITED_STEPS) -> DeviceAudit:
    """Run one unaudited step, then `steps` audited ones (fetching the batch included)."""
    totals = StepTotals(CUDA)
    iterator = iter(batches)
    train_step(parts, totals, *next(iterator), 0)
    with audit() as recorder:
        for index in range(1, steps + 1):
            images, labels = next(iterator)
            train_step(parts, totals, images, labels, index)
    return recorder


def read_dataset(cfg: TrainConfig) -> ImageDataset:
    """The dataset read for real, before the fake mode is entered: fake tensors carry no values."""
    return load_dataset(cfg.dataset, cfg.data_dir, cfg.download, **data_recipe(cfg).options)


def device_data(cfg: TrainConfig, dataset: ImageDataset, rank: int = 0, world_size: int = 1) -> DataSource:
    """`build_data` of a device-resident run on the fake GPU, from the dataset read beforehand."""
    with mock.patch("convinit.data.source.load_dataset", lambda *args, **kwargs: dataset):
        return build_data(data_recipe(cfg), CUDA, rank, world_size)


def device_run(cfg: TrainConfig, dataset: ImageDataset, **shard) -> tuple[StepParts, DataSource]:
    """The step's parts and the data of a device-resident run on the fake GPU."""
    data = device_data(cfg, dataset, **shard)
    model = open_model(resolve_plan(cfg), source_shape(data)).to(CUDA)
    if cfg.channels_last:
        model.to(memory_format=torch.channels_last)
    return step_parts(resolve_plan(cfg, CUDA), data, model, DistributedContext()), data


def assert_nothing_waits(recorder: DeviceAudit) -> None:
    assert recorder.blocking == [], describe(recorder.blocking)


def digits_config(preset: str, overrides: list[str]) -> TrainConfig:
    return resolve_config(
        preset, ["batch_size=64", *overrides, "dataset=digits", "device=cpu", "compile=false"]
    )


def steps_of(preset: str, overrides: list[str]) -> DeviceAudit:
    cfg = digits_config(preset, overrides)
    dataset = read_dataset(cfg)
    with fake_cuda():
        parts, data = device_run(cfg, dataset)
        return audit_steps(parts, data.train)


def test_cifar_crop_and_flip_recipe_steps_without_waiting():
    assert_nothing_waits(steps_of("paper1/recipe", ["crop_padding=4", "hflip=true", *TINY_VIT]))


def test_flip_only_recipe_steps_without_waiting():
    """The flip, the schedule, the fused AdamW update and the totals, with no crop."""
    assert_nothing_waits(steps_of("paper1/recipe", ["hflip=true", *TINY_VIT]))


def test_deit_preset_with_mixup_cutmix_ema_and_clipping_steps_without_waiting():
    overrides = ["model=deit_tiny", "img_size=32", "model_args.patch_size=8", "model_args.depth=1"]
    overrides += ["ema_decay=0.99996", "clip_grad=1.0", "batch_size=16", "repeated_aug=1"]
    assert_nothing_waits(steps_of("deit", overrides))


def test_deit_preset_without_randaugment_steps_without_waiting():
    """DeiT's resized crop, mixup/cutmix on soft targets, random erasing, EMA and clipping."""
    overrides = ["model=deit_tiny", "img_size=32", "model_args.patch_size=8", "model_args.depth=1"]
    overrides += ["ema_decay=0.99996", "clip_grad=1.0", "batch_size=16", "repeated_aug=1", "randaugment_n=0"]
    assert_nothing_waits(steps_of("deit", overrides))


def test_paper1_recipe_aug_steps_without_waiting():
    assert_nothing_waits(steps_of("paper1/recipe_aug", TINY_VIT))


def test_convmixer_with_batchnorm_steps_without_waiting():
    """BatchNorm's running statistics and integer counter, averaged by the EMA, in channels_last."""
    fig4 = ["model_args.spatial=impulse", "model_args.block=paper1", "model_args.filter_assignment=random"]
    overrides = ["model_args.depth=1", "ema_decay=0.999", "channels_last=true", "hflip=true"]
    assert_nothing_waits(steps_of("paper1/convmixer_small", [*fig4, *overrides]))  # paper1-fig4, small


def test_the_ddp_step_path_steps_without_waiting():
    """Under DDP the loss is per rank and not checked (`check_loss=False`) and each rank reads its shard;
    DDP's own all-reduce hooks run in the backward, which fake tensors cannot run (see fake_cuda)."""
    cfg = digits_config("paper1/recipe", [*TINY_VIT, "hflip=true"])
    dataset = read_dataset(cfg)
    with fake_cuda():
        parts, data = device_run(cfg, dataset, rank=1, world_size=2)
        parts.check_loss = False
        assert_nothing_waits(audit_steps(parts, data.train))


def test_the_audit_sees_the_waits_it_is_meant_to_catch_in_a_real_step():
    """The same audit, on a step with a host-made constant, fails: the suite can fail."""
    cfg = digits_config("paper1/recipe", TINY_VIT)
    dataset = read_dataset(cfg)
    with fake_cuda():
        parts, data = device_run(cfg, dataset)
        zero = torch.tensor(0, dtype=torch.uint8)
        host_made = ((images + zero.to(CUDA), labels) for images, labels in data.train)
        recorder = audit_steps(parts, host_made)
    assert [t.kind for t in recorder.blocking] == ["h2d"] * AUDITED_STEPS
    assert recorder.blocking[0].site.startswith("tests/gpu_path/test_training_step.py:")


def test_evaluation_copies_its_order_and_reads_its_sums_once_per_pass():
    cfg = digits_config("paper1/recipe", TINY_VIT)
    dataset = read_dataset(cfg)
    with fake_cuda():
        parts, data = device_run(cfg, dataset)
        with audit() as recorder:
            evaluate(parts.model, data.test, data.eval_transform, torch.bfloat16)
    sites = [(t.kind, t.site.split(":")[0]) for t in recorder.transfers]
    expected = [("h2d_async", "convinit/data/device_loader.py"), ("read", "convinit/train/trainer.py")]
    assert sites == expected, describe(recorder.transfers)


def test_an_epoch_copies_its_order_to_the_device_once_without_blocking_repeated_augmentation_too():
    """The epoch's order is the one host-to-device copy of a device-resident epoch, non-blocking (from
    pinned memory on a GPU); with repeated augmentation, counting the epoch's length copies nothing."""
    cfg = digits_config("paper1/recipe", [*TINY_VIT, "repeated_aug=3"])
    dataset = read_dataset(cfg)
    with fake_cuda():
        data = device_data(cfg, dataset)
        with audit() as recorder:
            batches = list(data.train)
    assert len(batches) == len(data.train) > 1
    sites = [(t.kind, t.site.split(":")[0]) for t in recorder.transfers]
    assert sites == [("h2d_async", "convinit/data/device_loader.py")], describe(recorder.transfers)


def streamed_steps(folder: Path, overrides: list[str]) -> DeviceAudit:
    """A streamed folder run: batches decoded on the host (workers=0: in this process, for real), moved
    to the device by the loader, normalised and erased there."""
    cfg = resolve_config("deit", [*overrides, "dataset=folder", f"data_dir={folder}", "data_mode=stream",
                                  "data_budget_gb=0.0001", "workers=0", "repeated_aug=1",
                                  "model=deit_tiny", "img_size=32", "model_args.patch_size=8",
                                  "model_args.depth=1", "batch_size=4", "device=cpu"])  # fmt: skip
    with fake_cuda():
        data = build_data(data_recipe(cfg), CUDA)
        data.train.pin_memory = False  # pinning needs a driver; the copy is non_blocking either way
        model = open_model(resolve_plan(cfg), source_shape(data)).to(CUDA)
        return audit_steps(step_parts(resolve_plan(cfg, CUDA), data, model, DistributedContext()), data.train)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    from convinit.speed.stream import fabricate_folder

    return fabricate_folder(
        tmp_path_factory.mktemp("folder") / "images", classes=2, per_class=6, val_per_class=2
    )


@pytest.mark.parametrize("mixing", [["mixup=0", "cutmix=0"], []], ids=["plain", "mixup_cutmix"])
def test_the_streamed_path_steps_without_waiting(image_folder, mixing):
    recorder = streamed_steps(image_folder, mixing)
    assert_nothing_waits(recorder)
    assert {t.kind for t in recorder.transfers} <= {"h2d_async"}  # the batch itself, from pinned memory


def test_convit_steps_and_evaluates_without_waiting():
    """GPSA's positional map in the step and in evaluation's no-grad forward (frozen pos_proj included)."""
    overrides = ["model=convit_tiny_patch4_32", "img_size=16", "model_args.depth=2"]
    cfg = digits_config("paper1/recipe_small", [*overrides, "model_args.local_up_to_layer=1"])
    dataset = read_dataset(cfg)
    with fake_cuda():
        parts, data = device_run(cfg, dataset)
        assert_nothing_waits(audit_steps(parts, data.train))
        images = data.eval_transform(next(iter(data.test))[0])
        parts.model.requires_grad_(False)
        with audit() as recorder, torch.no_grad():
            parts.model.eval()(images)
    assert_nothing_waits(recorder)
