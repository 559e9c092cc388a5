"""The work one training step launches does not grow with the batch: counted on a pretend CUDA device
(`fake_cuda.DeviceOpCount`), every recipe's step runs the same device ops at batch 16 and at batch 256.
An op per image (a crop, a resize, a copy) would leave the GPU waiting on Python at large batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from convinit.config import resolve_config
from convinit.data.source import build_data
from convinit.speed.fake_cuda import CUDA, DeviceOpCount, fake_cuda
from convinit.train.opening import open_model, source_shape
from convinit.train.plan import data_recipe, resolve_plan
from convinit.train.process import DistributedContext
from convinit.train.step_parts import StepParts, StepTotals, step_parts
from convinit.train.trainer import train_step
from tests.gpu_path.test_training_step import TINY_VIT, device_run, digits_config, read_dataset

SMALL, LARGE = 16, 256
DEIT = ["model=deit_tiny", "img_size=32", "model_args.patch_size=8", "model_args.depth=1",
        "ema_decay=0.99996", "clip_grad=1.0", "repeated_aug=1"]  # fmt: skip
RECIPES = {
    "crop_and_flip": ("paper1/recipe", ["crop_padding=4", "hflip=true", *TINY_VIT]),
    "deit_mixup": ("deit", [*DEIT, "cutmix=0"]),  # mixup or cutmix: one of them per batch, counted apart
    "deit_cutmix": ("deit", [*DEIT, "mixup=0"]),
    "paper1_recipe_aug": ("paper1/recipe_aug", TINY_VIT),
}


def counted_step(parts: StepParts, images: torch.Tensor, labels: torch.Tensor) -> dict[str, int]:
    """Device ops of one step, after one uncounted step (the optimiser's lazy moments)."""
    totals = StepTotals(CUDA)
    torch.manual_seed(0)
    train_step(parts, totals, images, labels, 0)
    with DeviceOpCount() as counter:
        train_step(parts, totals, images, labels, 1)
    return counter.ops


def batches_of(size: int, shape: tuple[int, ...], classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randint(0, 256, (size, *shape), dtype=torch.uint8, device=CUDA)
    return images, torch.randint(0, classes, (size,), device=CUDA)


def assert_same(counts: dict[int, dict[str, int]]) -> None:
    small, large = counts[SMALL], counts[LARGE]
    grown = {
        op: (small.get(op, 0), large.get(op, 0)) for op in {*small, *large} if small.get(op) != large.get(op)
    }
    assert sum(small.values()) == sum(large.values()) and not grown, f"ops that differ (16, 256): {grown}"


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_device_recipes_step_launches_the_same_ops_at_batch_16_and_256(recipe):
    preset, overrides = RECIPES[recipe]
    cfg = digits_config(preset, overrides)
    dataset = read_dataset(cfg)
    counts = {}
    with fake_cuda():
        parts, data = device_run(cfg, dataset)
        for size in (SMALL, LARGE):
            counts[size] = counted_step(parts, *batches_of(size, (data.in_chans, 8, 8), data.num_classes))
    assert_same(counts)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    from convinit.speed.stream import fabricate_folder

    return fabricate_folder(
        tmp_path_factory.mktemp("folder") / "images", classes=2, per_class=4, val_per_class=1
    )


@pytest.mark.parametrize("mixing", [["mixup=0", "cutmix=0"], ["cutmix=0"]], ids=["plain", "mixup"])
def test_the_streamed_finishing_step_launches_the_same_ops_at_batch_16_and_256(image_folder, mixing):
    """What the device does to a streamed batch (normalisation, erasing, mixing) and the step after it."""
    cfg = resolve_config("deit", [*mixing, *DEIT, "dataset=folder", f"data_dir={image_folder}",
                                  "data_mode=stream", "data_budget_gb=0.0001", "workers=0", "batch_size=4",
                                  "device=cpu"])  # fmt: skip
    counts = {}
    with fake_cuda():
        data = build_data(data_recipe(cfg), CUDA)
        model = open_model(resolve_plan(cfg), source_shape(data)).to(CUDA)
        parts = step_parts(resolve_plan(cfg, CUDA), data, model, DistributedContext())
        for size in (SMALL, LARGE):
            counts[size] = counted_step(parts, *batches_of(size, (3, 32, 32), data.num_classes))
    assert_same(counts)
