"""Streamed image data: for datasets larger than device memory (ImageNet-style class folders).

The device-resident path (`data/loader.py`) decodes a whole dataset once; ImageNet (1.28 M images, about
190 GB even at 224 px uint8) does not fit. Here images stay on disk at their own size, and DataLoader
workers decode and augment each one on its own, with timm's transforms: the reference that DeiT's (and
ConViT's) recipe is defined by, used as they are rather than re-implemented (SPEC section 5).

Two properties make a streamed run resumable exactly:
- The order of an epoch depends only on (seed, epoch): the same permutation as `DeviceLoader`, then
  DeiT's repeated augmentation through timm's `RepeatAugSampler` (each image `repeats` times per epoch,
  its copies on different ranks, the epoch no longer).
- Each sample's random augmentation is seeded by (seed, epoch, its position in the epoch), never by the
  worker that happens to load it, so a run resumed mid-epoch, or read with another number of workers,
  sees the same crops as an uninterrupted one.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, get_worker_info

from convinit.data.image_files import UNREADABLE, unreadable_image
from convinit.errors import DataError
from convinit.lifetime import die_with_worker_parent

# DeiT's RandAugment string (timm's 0-10 magnitude scale; "inc1": the magnitude-increasing ops).
DEIT_RANDAUGMENT = "rand-m9-mstd0.5-inc1"
# DeiT evaluates at 224 after resizing the short side to 256: 224 / 256.
DEIT_CROP_PCT = 0.875


@dataclass(frozen=True)
class StreamRecipe:
    """The per-sample transforms of a streamed run, in timm's terms (`timm.data.create_transform`).

    `randaugment` is a timm RandAugment string (`rand-m9-mstd0.5-inc1`) or None; `random_erasing` is
    the probability of timm's RandomErasing with per-pixel random values (`re_mode='pixel'`).
    """

    img_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    in_chans: int = 3
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: bool = True
    randaugment: str | None = DEIT_RANDAUGMENT
    random_erasing: float = 0.25
    interpolation: str = "bicubic"
    crop_pct: float = DEIT_CROP_PCT

    def train_transform(self) -> Callable[[Image.Image], torch.Tensor]:
        """RandomResizedCrop -> flip -> RandAugment -> normalise -> random erasing (timm's order)."""
        from timm.data import create_transform

        transform = create_transform(
            (self.in_chans, self.img_size, self.img_size),
            is_training=True,
            scale=self.crop_scale,
            ratio=self.crop_ratio,
            hflip=0.5 if self.hflip else 0.0,
            color_jitter=None,  # DeiT's recipe has none once RandAugment is on; we never add it
            auto_augment=self.randaugment,
            interpolation=self.interpolation,
            mean=self.mean,
            std=self.std,
            re_prob=self.random_erasing,
            re_mode="pixel",
        )
        return allow_posterize_to_zero_bits(transform)

    def eval_transform(self) -> Callable[[Image.Image], torch.Tensor]:
        """Resize the short side to img_size / crop_pct, centre-crop img_size, normalise."""
        from timm.data import create_transform

        return create_transform(
            (self.in_chans, self.img_size, self.img_size),
            is_training=False,
            interpolation=self.interpolation,
            mean=self.mean,
            std=self.std,
            crop_pct=self.crop_pct,
        )


def posterize_bits(img: Image.Image, bits_to_keep: int, **kwargs) -> Image.Image:
    """timm's posterize, with 0 bits kept giving a black image as older Pillow did (and as DeiT ran)."""
    from timm.data.auto_augment import posterize

    if bits_to_keep <= 0:
        return img.point(lambda value: 0)
    return posterize(img, bits_to_keep, **kwargs)


def allow_posterize_to_zero_bits(transform: Callable) -> Callable:
    """timm's PosterizeIncreasing keeps 4 - int(4 m / 10) bits: 0 at magnitude 10, which `mstd` noise
    reaches; current Pillow refuses 0 bits (ValueError) where older Pillow returned black. Swap in
    `posterize_bits` for timm's function in the transform's RandAugment operations."""
    for step in getattr(transform, "transforms", []):
        for op in getattr(step, "ops", []):
            if getattr(op, "name", "").startswith("Posterize"):
                op.aug_fn = posterize_bits
    return transform


def seed_sample(seed: int) -> None:
    """Seed every generator a transform may draw from (timm uses `random`, torch and numpy)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def kept_generators() -> Iterator[None]:
    """Restore Python's, numpy's and torch's CPU generators afterwards."""
    python, numpy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(python)
    np.random.set_state(numpy)


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """The augmentation seed of the sample at `position` of `epoch`'s global order."""
    return int(np.random.SeedSequence([seed, epoch, position]).generate_state(1, dtype=np.uint64)[0] >> 1)


class StreamingImages(Dataset):
    """Images decoded one at a time, indexed by (image index, augmentation seed).

    `source` is a list of image files (kept at their own size until the crop), or a uint8 (N, C, H, W)
    tensor of a dataset that a reader decoded whole (IDX, CIFAR), served the same way.
    """

    def __init__(
        self,
        source: Sequence[Path] | torch.Tensor,
        labels: Sequence[int],
        transform: Callable,
        in_chans: int = 3,
    ):
        if len(source) != len(labels):
            raise ValueError(f"{len(source)} images but {len(labels)} labels")
        self.source = source if isinstance(source, torch.Tensor) else [str(p) for p in source]
        self.labels = torch.as_tensor(labels, dtype=torch.long)
        self.transform = transform
        self.mode = "L" if in_chans == 1 else "RGB"

    def __len__(self) -> int:
        return len(self.source)

    def image(self, index: int) -> Image.Image:
        if isinstance(self.source, torch.Tensor):
            pixels = self.source[index].permute(1, 2, 0).numpy()  # (H, W, C)
            return Image.fromarray(pixels[..., 0] if pixels.shape[2] == 1 else pixels).convert(self.mode)
        try:
            with Image.open(self.source[index]) as img:
                return img.convert(self.mode)
        except UNREADABLE as exc:
            raise unreadable_image(self.source[index], exc) from exc

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        index, seed = key
        if get_worker_info() is not None:  # a worker process: its generators are its own
            seed_sample(seed)
            return self.transform(self.image(index)), self.labels[index]
        with kept_generators():  # the main process: leave the training run's generators as they were
            seed_sample(seed)
            return self.transform(self.image(index)), self.labels[index]


def epoch_order(
    n: int, seed: int, epoch: int, shuffle: bool, rank: int, world_size: int, repeats: int, drop_last: bool
) -> list[tuple[int, int]]:
    """This rank's (file index, global position) pairs for one epoch.

    Without repeats this is exactly `DeviceLoader.order()`; with repeats it is timm's `RepeatAugSampler`
    (DeiT's RASampler) fed the same permutation: its only use of the epoch is as the generator's seed.
    """
    global_seed = seed * 100_003 + epoch  # DeviceLoader's permutation seed
    if repeats > 1:
        from timm.data.distributed_sampler import RepeatAugSampler

        sampler = RepeatAugSampler(range(n), world_size, rank, shuffle=shuffle, num_repeats=repeats)
        sampler.set_epoch(global_seed)
        indices = list(sampler)
    else:
        if shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(global_seed))
        else:
            order = torch.arange(n)
        if drop_last:
            order = order[: n - n % world_size]
        indices = order[rank::world_size].tolist()
    return [(index, rank + i * world_size) for i, index in enumerate(indices)]


class StreamLoader:
    """Batches of (float images, labels) decoded by worker processes, in the order `epoch_order` gives.

    The interface is `DeviceLoader`'s (`set_epoch`, `len`, iteration) plus `start_batch`, which skips
    the first batches of the next epoch without decoding them (resuming mid-epoch).
    """

    def __init__(
        self,
        dataset: StreamingImages,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = False,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        repeats: int = 1,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int = 2,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank} and world_size {world_size}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.rank, self.world_size, self.repeats = rank, world_size, repeats
        self.num_workers, self.pin_memory, self.prefetch_factor = num_workers, pin_memory, prefetch_factor
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[tuple[int, int]]]:
        """This epoch's batches of (file index, augmentation seed) keys."""
        args = (self.shuffle, self.rank, self.world_size, self.repeats, self.drop_last)
        order = epoch_order(len(self.dataset), self.seed, self.epoch, *args)
        keys = [(index, sample_seed(self.seed, self.epoch, position)) for index, position in order]
        cut = len(keys) - len(keys) % self.batch_size if self.drop_last else len(keys)
        return [keys[i : i + self.batch_size] for i in range(0, cut, self.batch_size)]

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        batches, self.start_batch = self.batches()[self.start_batch :], 0
        if not batches:
            return iter(())
        workers = dict(prefetch_factor=self.prefetch_factor) if self.num_workers > 0 else {}
        loader = DataLoader(
            self.dataset,
            batch_sampler=batches,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            worker_init_fn=functools.partial(die_with_worker_parent, os.getpid()),  # no orphaned workers
            **workers,
        )
        return one_line_errors(iter(loader))


def one_line_errors(batches: Iterator) -> Iterator:
    """A worker's DataError (an unreadable image) arrives with the worker's traceback in its message:
    keep its last line, the one that names the file."""
    try:
        yield from batches
    except DataError as exc:
        raise DataError(
            str(exc).strip().splitlines()[-1].removeprefix("convinit.errors.DataError: ")
        ) from None


def decoded_bytes(n_images: int, in_chans: int, size: tuple[int, int]) -> int:
    """Bytes a device-resident copy of `n_images` uint8 images of `size` takes."""
    return n_images * in_chans * size[0] * size[1]


def choose_data_mode(mode: str, needed_bytes: int, budget_bytes: int) -> tuple[str, str]:
    """(`device` or `stream`, why): `auto` keeps data on the device only when it fits the budget."""
    if mode not in ("auto", "device", "stream"):
        raise ValueError(f"data_mode must be auto, device or stream, got {mode!r}")
    gib = f"{needed_bytes / 2**30:.2f} GiB decoded"
    if mode != "auto":
        return mode, f"data_mode={mode} ({gib})"
    if needed_bytes <= budget_bytes:
        return "device", f"{gib} fits the {budget_bytes / 2**30:.2f} GiB budget: device-resident"
    return "stream", f"{gib} exceeds the {budget_bytes / 2**30:.2f} GiB budget: streamed from disk"
