"""The data pipeline alone: device-resident uint8 batches through the full augmentation preset.

The preset is DeiT's (the heaviest convinit ships, as `deit.yaml` configures it): random resized crop,
horizontal flip, timm's RandAugment(2, m9, mstd 0.5) per sample, normalisation, random erasing 0.25 with
per-pixel noise, then mixup 0.8 / cutmix 1.0. The
images are random CIFAR-shaped uint8 tensors: every operation's cost depends on the shape, not the
pixels.
"""

from __future__ import annotations

import torch

from convinit.data import BatchAugment, DeviceLoader, MixupCutmix
from convinit.data.readers.cifar import CIFAR_MEAN, CIFAR_STD
from convinit.speed.models import INPUT, NUM_CLASSES
from convinit.speed.timing import interleaved_medians


def full_augmentation(device: torch.device) -> tuple[BatchAugment, MixupCutmix]:
    augment = BatchAugment(
        CIFAR_MEAN,
        CIFAR_STD,
        train=True,
        resized_crop_scale=0.08,
        hflip=True,
        randaugment_n=2,
        randaugment_m=9.0,
        randaugment_mstd=0.5,
        random_erasing=0.25,
        randaugment_policy="timm",
    ).to(device)
    return augment, MixupCutmix(NUM_CLASSES, mixup_alpha=0.8, cutmix_alpha=1.0)


def synthetic_dataset(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` random uint8 CIFAR-shaped images and labels."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, *INPUT), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    return images, labels


def pipeline_throughput(
    batch_size: int, device: torch.device, batches: int = 4, warmup: int = 1, repeats: int = 3
) -> dict[str, float]:
    """Images/s of loading + augmenting + mixing `batches` batches, median over repeats."""
    images, labels = synthetic_dataset(batch_size * batches)
    loader = DeviceLoader(images, labels, batch_size, device, shuffle=True)
    augment, mix = full_augmentation(device)

    def one_pass() -> None:
        for batch_images, batch_labels in loader:
            mix(augment(batch_images), batch_labels)

    timing = interleaved_medians({"pipeline": one_pass}, device, warmup=warmup, repeats=repeats)
    seconds = timing["pipeline"]["median"]
    return {"batch_size": batch_size, "images_per_s": batch_size * batches / seconds}
