"""Decoding folders of image files into one uint8 tensor (used by Tiny-ImageNet and `folder`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch
from PIL import Image

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def image_files(folder: Path) -> list[Path]:
    """Image files directly or recursively under `folder`, sorted for a stable order."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def decode_images(
    paths: list[Path], size: tuple[int, int] | None = None, grayscale: bool = False
) -> torch.Tensor:
    """Decode `paths` into (N, C, H, W) uint8; images of another size are resized (bilinear) to `size`.

    `size` defaults to the most common size among the files, so a folder of mixed sizes still loads.
    """
    mode = "L" if grayscale else "RGB"
    images = []
    for path in paths:
        with Image.open(path) as img:
            images.append(img.convert(mode))
    if size is None:
        width, height = Counter(img.size for img in images).most_common(1)[0][0]
        size = (height, width)
    height, width = size
    arrays = [np.asarray(img if img.size == (width, height) else img.resize((width, height), Image.BILINEAR))
              for img in images]  # fmt: skip
    stacked = np.stack(arrays)
    if grayscale:
        stacked = stacked[..., None]
    return torch.from_numpy(np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)))


def all_grayscale(paths: list[Path]) -> bool:
    for path in paths:
        with Image.open(path) as img:
            if img.mode not in ("L", "1", "I;16", "I"):
                return False
    return True
