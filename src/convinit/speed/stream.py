"""The streamed data path alone: JPEG decode + DeiT's per-sample transforms, by DataLoader worker count.

The files are fabricated ImageNet-shaped JPEGs (500 x 375, the collection's typical size) of random
pixels: decode and transform costs depend on the size and the codec, not the content. Each worker count
reads the same files, in interleaved rounds, and the median pass is reported.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from convinit.data.streamed_loader import StreamingImages, StreamLoader, StreamRecipe
from convinit.speed.timing import interleaved_medians

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def fabricate_jpegs(
    folder: Path, count: int, size: tuple[int, int] = (500, 375), seed: int = 0
) -> list[Path]:
    """`count` random RGB JPEGs of `size` (width, height) at quality 90, as ImageNet stores them."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"img{i:05d}.JPEG"
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


def fabricate_folder(root: str | Path, classes: int, per_class: int, val_per_class: int = 5) -> Path:
    """An ImageNet-style folder: `root/train/<class>/` and `root/val/<class>/` of 500x375 JPEGs."""
    root = Path(root)
    for split, count in (("train", per_class), ("val", val_per_class)):
        for c in range(classes):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            fabricate_jpegs(folder, count, seed=c * 2 + (split == "val"))
    return root


def stream_throughput(
    workers: Sequence[int] = (0, 2),
    images: int = 64,
    img_size: int = 224,
    batch_size: int = 32,
    warmup: int = 1,
    repeats: int = 3,
) -> dict[str, object]:
    """Images/s of decoding and augmenting `images` JPEGs per pass, for each number of workers."""
    recipe = StreamRecipe(img_size=img_size, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    with tempfile.TemporaryDirectory() as folder:
        paths = fabricate_jpegs(Path(folder), images)
        dataset = StreamingImages(paths, [0] * len(paths), recipe.train_transform())
        loaders = {
            n: StreamLoader(dataset, batch_size, shuffle=True, drop_last=False, repeats=3, num_workers=n)
            for n in workers
        }

        def one_pass(loader: StreamLoader):
            return lambda: sum(len(labels) for _, labels in loader)

        cases = {f"{n} workers": one_pass(loader) for n, loader in loaders.items()}
        timing = interleaved_medians(cases, torch.device("cpu"), warmup=warmup, repeats=repeats)
    seen = sum(len(batch) for batch in loaders[workers[0]].batches())  # DeiT's epoch: repeats, same length
    return {
        "img_size": img_size,
        "source": "500x375 JPEG",
        "images_per_pass": seen,
        "images_per_s": {str(n): seen / timing[f"{n} workers"]["median"] for n in workers},
    }
