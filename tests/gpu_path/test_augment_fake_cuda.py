"""Each preset's batch augmentation and the streamed loader on a pretend CUDA device: after the first
batch of a size, no blocking host-to-device copy and no host read (see `fake_cuda.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from convinit.data.augmentation.batch_augment import BatchAugment
from convinit.data.augmentation.randaugment import BatchRandAugment
from convinit.data.augmentation.randaugment_torchvision import TorchvisionRandAugment
from convinit.speed.fake_cuda import CUDA, audit, describe, fake_cuda

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
RECIPES = {
    "cifar_crop_flip": dict(crop_padding=4, hflip=True),
    "deit": dict(resized_crop_scale=0.08, out_size=(32, 32), hflip=True, randaugment_n=2, randaugment_m=9,
                 randaugment_mstd=0.5, random_erasing=0.25),
    "paper1_recipe_aug": dict(crop_padding=4, hflip=True, randaugment_n=2, randaugment_m=14,
                              randaugment_policy="torchvision"),
    "streamed_finish": dict(random_erasing=0.25),  # what the device does to a streamed batch
}  # fmt: skip


def audited_calls(module: torch.nn.Module, batch: torch.Tensor, calls: int = 2):
    """One unaudited call (lazy state: per-size tables), then `calls` audited ones."""
    module(batch)
    with audit() as recorder:
        for _ in range(calls):
            out = module(batch)
    return recorder, out


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_recipes_training_augmentation_waits_for_nothing_on_the_device(recipe):
    with fake_cuda():
        augment = BatchAugment(MEAN, STD, train=True, **RECIPES[recipe]).to(CUDA)
        images = torch.randint(0, 256, (16, 3, 36, 36), dtype=torch.uint8, device=CUDA)
        recorder, out = audited_calls(augment, images)
    assert recorder.blocking == [], describe(recorder.blocking)
    assert out.device == CUDA and out.dtype == torch.float32


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("policy", ["timm", "torchvision"])
def test_randaugment_moves_nothing_between_host_and_device(policy, channels):
    """Not even an asynchronous copy: its constants are made on the device (or once per image size)."""
    with fake_cuda():
        fill = MEAN[:channels]
        augment = (
            BatchRandAugment(2, 9, 0.5, fill=fill) if policy == "timm" else TorchvisionRandAugment(2, 14)
        )
        augment = augment.to(CUDA)
        recorder, out = audited_calls(augment, torch.rand(32, channels, 24, 20, device=CUDA))
    assert recorder.transfers == [], describe(recorder.transfers)
    assert out.shape == (32, channels, 24, 20)


def test_timm_randaugment_runs_its_grouped_round_on_an_accelerator():
    with fake_cuda():
        augment = BatchRandAugment(2, 9, 0.5).to(CUDA)
        chosen = []
        augment.per_op_round = lambda x, *_: chosen.append("per op") or x
        augment(torch.rand(4, 3, 8, 8, device=CUDA))
    assert chosen == []  # the per-operation round would read the device to find each op's samples


def test_torchvision_policy_copies_its_parameter_table_once_per_image_size():
    with fake_cuda():
        augment = TorchvisionRandAugment(2, 14)
        with audit() as first:
            augment(torch.rand(8, 3, 16, 16, device=CUDA))
        with audit() as again:
            augment(torch.rand(8, 3, 16, 16, device=CUDA))
    sites = {t.site.split(":")[0] for t in first.transfers}
    assert first.transfers and sites == {"convinit/data/augmentation/randaugment_torchvision.py"}, describe(
        first.transfers
    )
    assert again.transfers == []


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    from convinit.speed.stream import fabricate_folder

    return fabricate_folder(
        tmp_path_factory.mktemp("folder") / "images", classes=2, per_class=5, val_per_class=1
    )


def test_streamed_batches_reach_the_device_as_uint8_by_non_blocking_copies_only(image_folder):
    from convinit.data.readers.folder import folder_splits
    from convinit.data.streamed_loader import StreamingImages, StreamLoader, StreamRecipe

    files = folder_splits(image_folder)
    recipe = StreamRecipe(img_size=32, mean=MEAN, std=STD)
    with fake_cuda():
        dataset = StreamingImages(files.train_paths, files.train_labels, recipe.train_transform())
        loader = StreamLoader(dataset, 4, shuffle=True, drop_last=True, device=CUDA)
        with audit() as recorder:
            batches = list(loader)
    assert len(batches) == 2
    for images, labels in batches:
        assert images.device == CUDA and labels.device == CUDA
        assert images.dtype == torch.uint8 and images.shape == (4, 3, 32, 32)
    assert [t.kind for t in recorder.transfers] == ["h2d_async"] * 4, describe(recorder.transfers)
