"""What the model is trained on, as a picture: `augmentations.png` in the run directory shows training
samples spread over the set after the run's own augmentation (either data path), each captioned with its
class name, so a glance tells whether the pipeline does what its preset says (DeiT's crops, RandAugment,
erasing) and the labels match the pictures. Mixup and cutmix, which act on whole batches, are not shown.
TensorBoard gets the same grid (`augmentation_grid`)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from convinit.data import DeviceLoader
from convinit.data.source import DataSource
from convinit.data.streamed_loader import kept_generators, sample_seed
from convinit.system.atomic import atomic_write_bytes

PREVIEW_SAMPLES = 32
COLUMNS, PAD, CAPTION = 8, 2, 14  # tiles to a row, pixels between tiles, pixels of caption under each


@torch.no_grad()
def augmented_samples(
    data: DataSource, seed: int, count: int = PREVIEW_SAMPLES
) -> tuple[torch.Tensor, torch.Tensor]:
    """(count, C, H, W) training samples, spread over the training set, as the model sees them, mapped
    back to [0, 1], and their (count,) labels."""
    n = data.train_size
    picks = torch.linspace(0, n - 1, min(count, n)).long()  # spread over the classes, which files sort by
    device = data.train.images.device if isinstance(data.train, DeviceLoader) else data.augment.mean.device
    with own_generators(device, seed):  # the run's own random streams are not touched
        if isinstance(data.train, DeviceLoader):
            batch = data.augment(data.train.images[picks.to(data.train.images.device)])
            labels = data.train.labels[picks.to(data.train.labels.device)].cpu()
        else:
            dataset = data.train.dataset
            samples = [dataset[int(i), sample_seed(seed, 0, int(i))] for i in picks]
            images = torch.stack([image for image, _ in samples])  # uint8: the device finishes them
            batch = data.augment(images.to(data.augment.mean.device))
            labels = torch.stack([torch.as_tensor(label) for _, label in samples])
    mean = torch.tensor(data.mean, device=batch.device).view(1, -1, 1, 1)
    std = torch.tensor(data.std, device=batch.device).view(1, -1, 1, 1)
    return (batch * std + mean).clamp(0, 1).cpu(), labels


@contextmanager
def own_generators(device: torch.device, seed: int) -> Iterator[None]:
    """The preview draws from generators of its own: Python's, numpy's, torch's CPU one and `device`'s
    (the augmentation draws on the device) are saved, seeded from `seed`, and restored afterwards, so the
    run's random streams are exactly as if no preview had been drawn."""
    cuda = device.type == "cuda"
    with kept_generators(), torch.random.fork_rng(devices=[device] if cuda else []):
        torch.random.default_generator.manual_seed(seed)
        if cuda:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


def caption(name: str, width: int, font: ImageFont.ImageFont) -> str:
    """`name`, cut with an ellipsis to fit `width` pixels."""
    while len(name) > 1 and font.getlength(name) > width:
        name = name[:-2] + "…"
    return name


def augmentation_grid(data: DataSource, seed: int) -> np.ndarray:
    """(H, W, 3) uint8: `augmented_samples` 8 to a row, enlarged to at least 64 px, each captioned with its
    class name."""
    samples, labels = augmented_samples(data, seed)
    scale = max(1, 64 // samples.shape[-1])
    samples = torch.nn.functional.interpolate(samples, scale_factor=scale, mode="nearest")
    tiles = samples.expand(-1, 3, -1, -1).mul(255).round().byte().permute(0, 2, 3, 1).numpy()  # (B, h, w, 3)
    height, width = tiles.shape[1:3]
    rows = -(-len(tiles) // COLUMNS)
    cell_w, cell_h = width + PAD, height + CAPTION + PAD
    grid = Image.new("RGB", (COLUMNS * cell_w + PAD, rows * cell_h + PAD), "white")
    draw, font = ImageDraw.Draw(grid), ImageFont.load_default(size=11)
    for index, (tile, label) in enumerate(zip(tiles, labels.tolist(), strict=True)):
        x, y = PAD + (index % COLUMNS) * cell_w, PAD + (index // COLUMNS) * cell_h
        grid.paste(Image.fromarray(tile), (x, y))
        draw.text(
            (x, y + height + 1), caption(str(data.classes[label]), width, font), fill="black", font=font
        )
    return np.asarray(grid)


def save_augmentation_preview(data: DataSource, seed: int, path: Path) -> np.ndarray:
    """`augmentation_grid` as a PNG at `path`; returns the grid (for TensorBoard)."""
    grid = augmentation_grid(data, seed)
    buffer = io.BytesIO()
    Image.fromarray(grid).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())
    return grid
