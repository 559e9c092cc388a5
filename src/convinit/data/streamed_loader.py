"""Streamed image data: for datasets larger than device memory (ImageNet-style class folders).

The device-resident path (`data/device_loader.py`) decodes a whole dataset once; ImageNet (1.28 M
images, about 190 GB even at 224 px uint8) does not fit. Here images stay on disk at their own size,
and DataLoader workers decode and augment each one on its own, with timm's transforms: the reference
that DeiT's (and ConViT's) recipe is defined by, used as they are rather than re-implemented
(docs/method.md §5).

The split is timm's own prefetcher split (`create_transform(use_prefetcher=True)`): workers crop, flip
and apply RandAugment, and ship uint8 (a quarter of float32's bytes); normalisation and random erasing
run on the training device on the whole batch (`StreamRecipe.device_augment`,
`data/augmentation/batch_augment.py`).
Batches reach the device one step ahead: on CUDA the copy from pinned memory runs on a side stream that
the training stream waits on by an event, never on the host. One DataLoader, with persistent workers,
serves every epoch.

Two properties make a streamed run resumable exactly:
- The order of an epoch depends only on (seed, epoch): the permutation `DeviceLoader` takes too
  (`data/epoch_order.py`), then DeiT's repeated augmentation through timm's `RepeatAugSampler` (each
  image `repeats` times per epoch, its copies on different ranks, the epoch no longer).
- Each sample's random augmentation is seeded by (seed, epoch, its position in the epoch), never by the
  worker that happens to load it, so a run resumed mid-epoch, or read with another number of workers,
  sees the same crops as an uninterrupted one. Random erasing, on the device, draws from the run's own
  generator, which checkpoints save, as on the device-resident path.
"""

from __future__ import annotations

import functools
import os
import random
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from convinit.data.epoch_order import epoch_indices
from convinit.data.image_files import UNREADABLE, open_image, to_mode, unreadable_image
from convinit.errors import DataError
from convinit.system.parent_death import die_with_worker_parent
from convinit.system.torchvision_pair import needs_torchvision

# DeiT's RandAugment string (timm's 0-10 magnitude scale; "inc1": the magnitude-increasing ops).
DEIT_RANDAUGMENT = "rand-m9-mstd0.5-inc1"
# DeiT evaluates at 224 after resizing the short side to 256: 224 / 256.
DEIT_CROP_PCT = 0.875


@dataclass(frozen=True)
class StreamRecipe:
    """The per-sample transforms of a streamed run, in timm's terms (`timm.data.create_transform`).

    `randaugment` is a timm RandAugment string (`rand-m9-mstd0.5-inc1`) or None; `random_erasing` is
    the probability of timm's RandomErasing with per-pixel random values (`re_mode='pixel'`). The
    per-sample transforms give uint8 (C, H, W) tensors; `device_augment` finishes them on the device.
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
        """RandomResizedCrop -> flip -> RandAugment, to uint8 (timm's order; normalise and random erasing
        follow on the device)."""
        with needs_torchvision("the streamed loader's transforms (timm)"):
            from timm.data import create_transform

        transform = create_transform(
            (self.in_chans, self.img_size, self.img_size),
            is_training=True,
            use_prefetcher=True,  # uint8 out: normalisation and erasing are the device's
            scale=self.crop_scale,
            ratio=self.crop_ratio,
            hflip=0.5 if self.hflip else 0.0,
            color_jitter=None,  # DeiT's recipe has none once RandAugment is on; we never add it
            auto_augment=self.randaugment,
            interpolation=self.interpolation,
            mean=self.mean,
        )
        return allow_posterize_to_zero_bits(transform)

    def eval_transform(self) -> Callable[[Image.Image], torch.Tensor]:
        """Resize the short side to img_size / crop_pct, centre-crop img_size, to uint8."""
        with needs_torchvision("the streamed loader's transforms (timm)"):
            from timm.data import create_transform

        return create_transform(
            (self.in_chans, self.img_size, self.img_size),
            is_training=False,
            use_prefetcher=True,
            interpolation=self.interpolation,
            crop_pct=self.crop_pct,
        )

    def device_augment(self, train: bool) -> nn.Module:
        """What finishes a uint8 batch on the device: timm's ToTensor -> Normalize -> RandomErasing
        (per-pixel noise) when training, ToTensor -> Normalize when evaluating."""
        from convinit.data.augmentation.batch_augment import BatchAugment

        erase = self.random_erasing if train else 0.0
        return BatchAugment(self.mean, self.std, train=train, random_erasing=erase)


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


GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment


def splitmix64(state: np.ndarray) -> np.ndarray:
    """splitmix64's output function (Steele et al. 2014), vectorised: a bijection of uint64 that mixes
    every input bit into every output bit."""
    with np.errstate(over="ignore"):
        z = (state ^ (state >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sample_seeds(seed: int, epoch: int, positions: np.ndarray) -> np.ndarray:
    """The augmentation seeds (int64, >= 0) of the samples at `positions` of `epoch`'s global order:
    splitmix64's stream keyed by (seed, epoch), one array operation for a whole epoch (a SeedSequence
    per sample cost about 27 us, 35 s per ImageNet epoch, in the main process)."""
    key = np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0]
    with np.errstate(over="ignore"):
        state = key + (np.asarray(positions, dtype=np.uint64) + np.uint64(1)) * GOLDEN_GAMMA
    return (splitmix64(state) >> np.uint64(1)).astype(np.int64)


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """The augmentation seed of the sample at `position` of `epoch`'s global order."""
    return int(sample_seeds(seed, epoch, np.array([position]))[0])


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
            with open_image(self.source[index]) as img:
                return to_mode(img, self.mode, self.source[index])
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


class EpochBatches(Sampler):
    """A StreamLoader's batch sampler: it reads the loader's epoch each time it is iterated, so that one
    DataLoader, whose workers persist, serves every epoch (iterated in the main process)."""

    def __init__(self, loader: StreamLoader):
        self.loader = weakref.proxy(loader)  # no cycle: the loader's workers end with the loader
        self.start = 0

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return self.loader.batch_keys(self.start)

    def __len__(self) -> int:
        return len(self.loader) - self.start


def to_device(
    batches: Iterator[tuple[torch.Tensor, ...]], device: torch.device
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Each batch's tensors on `device`, in order: batch k is fetched from the workers only once batch
    k - 1 has been handed to the step, so a step never waits for the decoding of the batch after it.
    On CUDA the copy (from pinned memory) is issued on a side stream, which starts it at once while the
    training stream still runs the previous step's queued kernels; the training stream waits on an event
    before it uses the batch, and the host never waits. Elsewhere the copies are plain `.to(device)`."""
    if device.type != "cuda" or not torch.cuda.is_available():
        for batch in batches:
            yield tuple(t.to(device, non_blocking=True) for t in batch)
        return
    side = torch.cuda.Stream(device)
    for batch in batches:
        with torch.cuda.stream(side):
            moved = tuple(t.to(device, non_blocking=True) for t in batch)
            copied = torch.cuda.Event()
            copied.record(side)
        main = torch.cuda.current_stream(device)
        main.wait_event(copied)
        for tensor in moved:  # memory made on the side stream, used on the main one
            tensor.record_stream(main)
        yield moved


class StreamLoader:
    """Batches of (uint8 images, labels) decoded by worker processes, in the order `epoch_indices` gives,
    on `device` when one is given (see `to_device`).

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
        device: torch.device | None = None,
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
        self.device = device
        self.epoch = 0
        self.start_batch = 0
        self.sampler = EpochBatches(self)
        self.loader: DataLoader | None = None  # built on first use, kept with its workers

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> np.ndarray:
        """This epoch's file indices, cut to whole batches with `drop_last`."""
        args = (self.shuffle, self.rank, self.world_size, self.repeats, self.drop_last)
        indices = epoch_indices(len(self.dataset), self.seed, self.epoch, *args)
        return indices[: len(indices) - len(indices) % self.batch_size] if self.drop_last else indices

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        """This epoch's (file indices, augmentation seeds), cut to whole batches with `drop_last`."""
        indices = self.indices()
        positions = self.rank + np.arange(len(indices)) * self.world_size
        return indices, sample_seeds(self.seed, self.epoch, positions)

    def batch_keys(self, start: int = 0) -> Iterator[list[tuple[int, int]]]:
        """This epoch's batches of (file index, augmentation seed) keys, from batch `start` on."""
        indices, seeds = self.keys()
        size = self.batch_size
        for i in range(start * size, len(indices), size):
            yield list(zip(indices[i : i + size].tolist(), seeds[i : i + size].tolist(), strict=True))

    def batches(self) -> list[list[tuple[int, int]]]:
        """This epoch's batches of (file index, augmentation seed) keys."""
        return list(self.batch_keys())

    def __len__(self) -> int:
        return -(-len(self.indices()) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.start, self.start_batch = self.start_batch, 0
        if len(self.sampler) <= 0:
            return iter(())
        if self.loader is None:
            workers = self.num_workers > 0
            self.loader = DataLoader(
                self.dataset,
                batch_sampler=self.sampler,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                persistent_workers=workers,
                # its own generator: the workers' base seed (unused: samples are seeded by their keys)
                # must not advance the run's generator, which the device augmentation draws from
                generator=torch.Generator().manual_seed(self.seed),
                worker_init_fn=functools.partial(die_with_worker_parent, os.getpid()),  # no orphans
                **(dict(prefetch_factor=self.prefetch_factor) if workers else {}),
            )
        batches = one_line_errors(iter(self.loader))
        return batches if self.device is None else to_device(batches, self.device)


def one_line_errors(batches: Iterator) -> Iterator:
    """A worker's DataError (an unreadable image) arrives with the worker's traceback in its message:
    keep its last line, the one that names the file."""
    try:
        yield from batches
    except DataError as exc:
        raise DataError(
            str(exc).strip().splitlines()[-1].removeprefix("convinit.errors.DataError: ")
        ) from None


STATISTICS_SAMPLE = 256  # training images decoded to estimate a streamed folder's statistics


def sampled_statistics(
    paths: Sequence[Path], in_chans: int, count: int = STATISTICS_SAMPLE
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std, in [0, 1] units, over the pixels of `count` images spread evenly over
    `paths`: the set's own statistics, which the device-resident path computes over every image, for the
    price of decoding `count` (JPEGs decoded at a reduced scale, about 512 px, which keeps the mean)."""
    mode = "L" if in_chans == 1 else "RGB"
    total, total_sq, n = np.zeros(in_chans), np.zeros(in_chans), 0
    for path in list(paths)[:: max(1, len(paths) // count)][:count]:
        try:
            with open_image(path) as img:
                img.draft(mode, (512, 512))
                pixels = np.asarray(to_mode(img, mode, path), dtype=np.float64).reshape(-1, in_chans) / 255
        except UNREADABLE as exc:  # a decompression bomb or a corrupt file: one line naming it
            raise unreadable_image(path, exc) from exc
        total, total_sq, n = total + pixels.sum(0), total_sq + (pixels**2).sum(0), n + len(pixels)
    mean = total / n
    std = np.sqrt(np.maximum(total_sq / n - mean**2, 1e-12))
    return tuple(mean.tolist()), tuple(std.tolist())


def decoded_bytes(n_images: int, in_chans: int, size: tuple[int, int]) -> int:
    """Bytes a device-resident copy of `n_images` uint8 images of `size` takes."""
    return n_images * in_chans * size[0] * size[1]


def choose_data_mode(
    mode: str, needed_bytes: int, budget_bytes: int, streamed_from: str = "disk"
) -> tuple[str, str]:
    """(`device` or `stream`, why): `auto` keeps data on the device only when it fits the budget."""
    if mode not in ("auto", "device", "stream"):
        raise ValueError(f"data_mode must be auto, device or stream, got {mode!r}")
    gib = f"{needed_bytes / 2**30:.2f} GiB decoded"
    if mode != "auto":
        return mode, f"data_mode={mode} ({gib})"
    if needed_bytes <= budget_bytes:
        return "device", f"{gib} fits the {budget_bytes / 2**30:.2f} GiB budget: device-resident"
    return "stream", f"{gib} exceeds the {budget_bytes / 2**30:.2f} GiB budget: streamed from {streamed_from}"
