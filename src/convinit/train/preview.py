"""What the model is trained on, as a picture: `augmentations.png` in the run directory shows the first
training samples after the run's own augmentation (either data path), so a glance tells whether the
pipeline does what its preset says (DeiT's crops, RandAugment, erasing). Mixup and cutmix, which act on
whole batches, are not shown."""

from __future__ import annotations

import io
from pathlib import Path

import torch
from PIL import Image
from torchvision.utils import make_grid

from convinit.atomic import atomic_write_bytes
from convinit.data import DeviceLoader
from convinit.data.stream import kept_generators, sample_seed
from convinit.train.data_source import DataSource

PREVIEW_SAMPLES = 32


@torch.no_grad()
def augmented_samples(data: DataSource, seed: int, count: int = PREVIEW_SAMPLES) -> torch.Tensor:
    """(count, C, H, W) training samples, spread over the training set, as the model sees them, mapped
    back to [0, 1]."""
    n = data.train_size
    picks = torch.linspace(0, n - 1, min(count, n)).long()  # spread over the classes, which files sort by
    with kept_generators():  # the run's own random streams are not touched
        if isinstance(data.train, DeviceLoader):
            batch = data.augment(data.train.images[picks.to(data.train.images.device)])
        else:
            dataset = data.train.dataset
            images = torch.stack([dataset[int(i), sample_seed(seed, 0, int(i))][0] for i in picks])  # uint8
            batch = data.augment(images.to(data.augment.mean.device))
    mean = torch.tensor(data.mean, device=batch.device).view(1, -1, 1, 1)
    std = torch.tensor(data.std, device=batch.device).view(1, -1, 1, 1)
    return (batch * std + mean).clamp(0, 1).cpu()


def save_augmentation_preview(data: DataSource, seed: int, path: Path) -> None:
    """A grid of `augmented_samples`, 8 to a row, enlarged to at least 64 px per image, as PNG."""
    samples = augmented_samples(data, seed)
    scale = max(1, 64 // samples.shape[-1])
    samples = torch.nn.functional.interpolate(samples, scale_factor=scale, mode="nearest")
    grid = make_grid(samples, nrow=8, padding=2, pad_value=1.0).mul(255).round().byte()
    buffer = io.BytesIO()
    Image.fromarray(grid.permute(1, 2, 0).numpy().squeeze()).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())
