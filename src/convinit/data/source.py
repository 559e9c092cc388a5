"""Where a run's batches come from: the device-resident path or the streamed one (`data_mode`).

`device` decodes the training set once and keeps it on the training device (fast for small sets);
`stream` reads images in DataLoader workers with timm's per-sample transforms (any size of dataset)
and finishes them on the device (normalisation, random erasing);
`auto` keeps data on the device when its decoded size fits `data_budget_gb` (default: half the free
memory of the training device) and streams otherwise, and says which it chose and why. Both give the
loop the same thing: batches, a transform that makes a batch the model's input on the device, and the
dataset's shape, so the loop does not know which path it reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from convinit.data import (
    BatchAugment,
    DeviceLoader,
    dataset_info,
    holdout_split,
    load_dataset,
    stratified_subset,
)
from convinit.data.cores import decoding_workers
from convinit.data.datasets import ImageDataset
from convinit.data.image_files import GRAYSCALE_MODES, UNREADABLE, open_image, unreadable_image
from convinit.data.readers.folder import FolderSplits
from convinit.data.recipe import AugmentRecipe, DataRecipe
from convinit.data.streamed_loader import (
    StreamingImages,
    StreamLoader,
    StreamRecipe,
    choose_data_mode,
    decoded_bytes,
    sampled_statistics,
)
from convinit.errors import ConfigError
from convinit.models.layers import pair

# timm's defaults (ImageNet's statistics), for `folder_statistics(..., source="imagenet")`
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
HEADER_SAMPLE = 256  # image headers read to estimate a folder's decoded size and channels
INIT_BATCH = 64  # real training images an init scheme fits on and is measured on (`init_batch`)
# more training images the init's held-apart figures are measured on (fitted on by no scheme): 128 fill the
# 2,048 patch tokens a real-pass report measures on a 4x4 grid; the held-apart mass of 16 images spread
# 4x wider over draws (docs/own-models.md, "The report")
HELD_APART = 128


@dataclass
class DataSource:
    """A run's data, whichever path serves it."""

    mode: str  # device or stream
    reason: str
    train: DeviceLoader | StreamLoader
    test: DeviceLoader | StreamLoader
    augment: Callable[[torch.Tensor], torch.Tensor]  # a training batch -> normalised input on the device
    eval_transform: Callable[[torch.Tensor], torch.Tensor]
    classes: list[str]
    in_chans: int
    img_size: int | tuple[int, int]  # as the model is built: the config's, else the dataset's (H, W)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    train_size: int
    init_set: StreamingImages | None = None  # streamed: the training images under the evaluation transform
    crop_pct: float | None = None  # streamed: the evaluation's centre crop (its record says so)
    evaluated_on: str = "test"  # or "validation": images held out of the training pool (holdout_per_class)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def counts(self) -> str:
        """'10 classes (0, 1, 2, ..., 8, 9), 1000 training / 797 test images': what the run found, said at its
        start so that a folder read other than meant (a class too few, a split too small) shows at once."""
        names = [str(c) for c in self.classes]
        shown = ", ".join(names if len(names) <= 6 else [*names[:3], "...", *names[-2:]])
        test = self.test.labels if isinstance(self.test, DeviceLoader) else self.test.dataset
        split = f"{len(test)} {self.evaluated_on} images"
        counts = f"{len(names)} classes ({shown}), {self.train_size} training / {split}"
        if self.evaluated_on == "validation":
            counts += " (held out of the training images; the test set is not read)"
        return counts

    def fit_loader(self, batch_size: int) -> DeviceLoader | None:
        """The training images in file order, unaugmented: whether a run fits its training set is read on
        them at its end (a streamed set, whose images are decoded per batch, has none)."""
        if not isinstance(self.train, DeviceLoader):
            return None
        return DeviceLoader(self.train.images, self.train.labels, batch_size, self.train.images.device)

    def init_batch(self, count: int = INIT_BATCH, extra: int = 0) -> torch.Tensor:
        """`count` training images spread evenly over the training set, then `extra` others spread evenly
        over the rest, preprocessed as for evaluation (no augmentation), on the CPU: what
        `initialize(..., images=...)` fits on and measures at step 0."""
        n = self.train_size
        picks = torch.linspace(0, n - 1, min(count, n)).long()
        others = torch.ones(n, dtype=torch.bool).index_fill_(0, picks, False).nonzero().flatten()
        if extra and len(others):
            spread = torch.linspace(0, len(others) - 1, min(extra, len(others))).long()
            picks = torch.cat([picks, others[spread]])
        if isinstance(self.train, DeviceLoader):
            return self.eval_transform(self.train.images[picks.to(self.train.images.device)]).cpu()
        images = torch.stack([self.init_set[int(i), 0][0] for i in picks])  # uint8, on the CPU
        return self.eval_transform(images.to(self.eval_transform.mean.device)).cpu()

    def test_batch(self, count: int, device: torch.device) -> torch.Tensor:
        """The first `count` test images as model input (trackers and the forward check use them)."""
        if isinstance(self.test, DeviceLoader):
            return self.eval_transform(self.test.images[:count].to(device))
        data = self.test.dataset
        images = torch.stack([data[i, 0][0] for i in range(min(count, len(data)))])  # uint8
        return self.eval_transform(images.to(device))


def memory_budget(recipe: DataRecipe, device: torch.device) -> int:
    """Bytes the device-resident path may use: `data_budget_gb`, else half the device's free memory."""
    if recipe.data_budget_gb is not None:
        return int(recipe.data_budget_gb * 2**30)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] // 2
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


def sampled_shape(paths: list[Path]) -> tuple[int, tuple[int, int]]:
    """(channels, typical (H, W)) from the headers of an evenly spread sample of the files."""
    step = max(1, len(paths) // HEADER_SAMPLE)
    sizes, grey = [], True
    for path in paths[::step][:HEADER_SAMPLE]:
        try:
            with open_image(path) as img:  # over PIL's pixel limit: refused from the header
                sizes.append(img.size)
                grey = grey and img.mode in GRAYSCALE_MODES
        except UNREADABLE as exc:  # a decompression bomb is refused from its header: one line
            raise unreadable_image(path, exc) from exc
    width, height = sorted(sizes)[len(sizes) // 2]
    return (1 if grey else 3), (height, width)


def streamed_dataset(
    recipe: DataRecipe,
    dataset: ImageDataset,
    keep: torch.Tensor,
    reason: str,
    common: dict[str, Any],
    rank: int,
    world_size: int,
    device: torch.device,
) -> DataSource:
    """A decoded dataset served per sample through DataLoader workers (data_mode=stream)."""
    img_size = common["img_size"]
    transforms = stream_recipe(recipe.augment, pair(img_size)[0], dataset.mean, dataset.std, dataset.in_chans)
    train_set = StreamingImages(
        dataset.train_images[keep], dataset.train_labels[keep], transforms.train_transform(), dataset.in_chans
    )
    test_set = StreamingImages(
        dataset.test_images, dataset.test_labels, transforms.eval_transform(), dataset.in_chans
    )
    loaders = stream_loaders(recipe, train_set, test_set, rank, world_size, device)
    init_set = StreamingImages(
        train_set.source, train_set.labels, transforms.eval_transform(), dataset.in_chans
    )
    augment, eval_transform = (
        transforms.device_augment(True).to(device),
        transforms.device_augment(False).to(device),
    )
    return DataSource(
        "stream",
        reason,
        *loaders,
        augment,
        eval_transform,
        **common,
        init_set=init_set,
        crop_pct=recipe.augment.crop_pct,
    )


def drops_last_batch(recipe: DataRecipe, train_size: int, world_size: int) -> bool:
    """Whether an epoch drops its last partial batch: under DDP always (every rank takes equal steps), else
    only when the recipe asks for it (the papers' code) and the set fills more than one batch. Kept, a
    120-image set at batch 64 trains on all 120 images each epoch, in two steps instead of one."""
    return world_size > 1 or (recipe.drop_last and train_size > recipe.batch_size)


def build_data(recipe: DataRecipe, device: torch.device, rank: int = 0, world_size: int = 1) -> DataSource:
    """The run's DataSource. The mode is chosen before anything goes to the device: a folder's from its
    image headers before anything is decoded, any other set's once its reader has decoded it into host
    memory (`decoded_set_mode`; fixed-format sets too large for the machine are refused before that, by
    the run's validation)."""
    info = dataset_info(recipe.dataset)
    mode = None
    if info.list_files is not None and recipe.data_mode != "device":  # streamable before any decoding
        files = info.list_files(info.resolve_dir(recipe.data_dir))
        in_chans, size = sampled_shape(files.train_paths)
        needed = decoded_bytes(len(files.train_paths), in_chans, size)
        mode, reason = choose_data_mode(recipe.data_mode, needed, memory_budget(recipe, device))
        if mode == "stream":
            return streamed_folder(recipe, files, in_chans, reason, rank, world_size, device)
    elif recipe.data_mode == "stream":
        mode, reason = "stream", "data_mode=stream (a reader that decodes the whole set, served per sample)"
    dataset = load_dataset(recipe.dataset, recipe.data_dir, recipe.download, **recipe.options)
    keep, held_out = training_split(recipe, dataset.train_labels)
    if mode is None:
        mode, reason = decoded_set_mode(recipe, device, dataset, keep)
    if mode == "stream" and held_out is not None:
        raise ConfigError(STREAMED_HOLDOUT)
    img_size = recipe.img_size or dataset.img_size
    common = dict(
        classes=dataset.classes,
        in_chans=dataset.in_chans,
        img_size=img_size,
        mean=dataset.mean,
        std=dataset.std,
        train_size=len(keep),
    )
    if mode == "stream":
        return streamed_dataset(recipe, dataset, keep, reason, common, rank, world_size, device)
    train = DeviceLoader(
        dataset.train_images[keep],
        dataset.train_labels[keep],
        recipe.batch_size // world_size,
        device,
        shuffle=True,
        drop_last=drops_last_batch(recipe, len(keep), world_size),
        seed=recipe.seed,
        rank=rank,
        world_size=world_size,
        repeats=recipe.repeated_aug,
    )
    shard = dict(rank=rank, world_size=world_size)  # under DDP each rank evaluates its shard of the test set
    split, *evaluated = evaluation_images(dataset, held_out)
    test = DeviceLoader(*evaluated, recipe.eval_batch_size, device, **shard)
    augment = device_augmentation(recipe.augment, dataset.mean, dataset.std, pair(img_size)).to(device)
    eval_transform = BatchAugment(dataset.mean, dataset.std, pair(img_size)).to(device)
    return DataSource("device", reason, train, test, augment, eval_transform, **common, evaluated_on=split)


STREAMED_HOLDOUT = (
    "holdout_per_class needs the data held in memory (data_mode=device), not streamed; "
    "set data_mode=device or drop holdout_per_class"
)


def training_split(recipe: DataRecipe, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the training images kept, the validation images held out of the training set or None)."""
    keep = stratified_subset(
        labels, recipe.train_fraction, recipe.per_class, recipe.seed, recipe.subset_order
    )
    if recipe.holdout_per_class is None:
        return keep, None
    return holdout_split(labels, keep, recipe.holdout_per_class, recipe.seed)


def evaluation_images(
    dataset: ImageDataset, held_out: torch.Tensor | None
) -> tuple[str, torch.Tensor, torch.Tensor]:
    """What a run evaluates on: the test set, or its validation split, which then stands where the test set
    stood (the test set is never read)."""
    if held_out is None:
        return "test", dataset.test_images, dataset.test_labels
    return "validation", dataset.train_images[held_out], dataset.train_labels[held_out]


def decoded_set_mode(
    recipe: DataRecipe, device: torch.device, dataset: ImageDataset, keep: torch.Tensor
) -> tuple[str, str]:
    """Device or stream for a set its reader decoded whole (every reader but a streamed folder's), sized
    before any of it goes to the device: `auto` keeps it there when the training and test images fit
    `data_budget_gb`, else serves it per sample from host memory; `device` refuses, in one line, a set
    larger than the device's free memory instead of failing in the copy. A CPU run keeps the set where it
    was decoded: streaming it would hold the same memory and only add work."""
    if device.type == "cpu" and recipe.data_mode == "auto":
        return (
            "device",
            f"data_mode=auto: {recipe.dataset} is decoded in host memory, where a CPU run keeps it",
        )
    images = len(keep) * dataset.train_images[0].numel() + dataset.test_images.numel()
    mode, reason = choose_data_mode(recipe.data_mode, images, memory_budget(recipe, device), "host memory")
    if mode == "device" and device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        if images > free:
            raise ConfigError(
                f"data_mode=device: {recipe.dataset}'s decoded images need {images / 2**30:.2f} GiB but "
                f"{device} has {free / 2**30:.2f} GiB free; use data_mode=auto or data_mode=stream"
            )
    return mode, reason


def device_augmentation(
    augment: AugmentRecipe, mean: tuple, std: tuple, img_size: tuple[int, int]
) -> BatchAugment:
    return BatchAugment(
        mean,
        std,
        img_size,
        train=True,
        crop_padding=augment.crop_padding,
        hflip=augment.hflip,
        randaugment_n=augment.randaugment_n,
        randaugment_m=augment.randaugment_m,
        randaugment_mstd=augment.randaugment_mstd,
        random_erasing=augment.random_erasing,
        randaugment_policy=augment.randaugment_policy,
        resized_crop_scale=augment.resized_crop_scale,
    )


def stream_recipe(
    augment: AugmentRecipe, img_size: int, mean: tuple, std: tuple, in_chans: int
) -> StreamRecipe:
    """timm's transforms for this augmentation: DeiT's when the preset asks for its pieces."""
    if augment.randaugment_n and augment.randaugment_policy != "timm":
        raise ConfigError(
            "the streamed path applies timm's RandAugment; use randaugment_policy=timm or data_mode=device"
        )
    if augment.crop_padding:
        raise ConfigError(
            "the streamed path crops with resized_crop_scale (timm's RandomResizedCrop), not "
            "crop_padding; set crop_padding=0 or data_mode=device"
        )
    randaugment = None
    if augment.randaugment_n:
        mstd = f"-mstd{augment.randaugment_mstd:g}" if augment.randaugment_mstd else ""
        randaugment = f"rand-m{augment.randaugment_m:g}-n{augment.randaugment_n}{mstd}-inc1"
    if augment.resized_crop_scale is None:  # no random crop: the central square, resized (timm's fallback)
        crop_scale, crop_ratio = (1.0, 1.0), (1.0, 1.0)
    else:
        crop_scale, crop_ratio = (augment.resized_crop_scale, 1.0), (3 / 4, 4 / 3)
    return StreamRecipe(
        img_size=img_size,
        mean=tuple(mean),
        std=tuple(std),
        in_chans=in_chans,
        crop_scale=crop_scale,
        crop_ratio=crop_ratio,
        hflip=augment.hflip,
        randaugment=randaugment,
        random_erasing=augment.random_erasing,
        crop_pct=augment.crop_pct,
    )


def stream_loaders(
    recipe: DataRecipe,
    train_set: StreamingImages,
    test_set: StreamingImages,
    rank: int,
    world_size: int,
    device: torch.device,
) -> tuple[StreamLoader, StreamLoader]:
    workers = decoding_workers(recipe.workers)  # this rank's share of the cores (LOCAL_WORLD_SIZE ranks)
    pin = device.type == "cuda"
    train = StreamLoader(
        train_set,
        recipe.batch_size // world_size,
        seed=recipe.seed,
        shuffle=True,
        drop_last=drops_last_batch(recipe, len(train_set), world_size),
        rank=rank,
        world_size=world_size,
        repeats=recipe.repeated_aug,
        num_workers=workers,
        pin_memory=pin,
        device=device,
    )
    test = StreamLoader(  # under DDP each rank evaluates its shard (see `evaluate` in train/trainer.py)
        test_set,
        recipe.eval_batch_size,
        rank=rank,
        world_size=world_size,
        num_workers=workers,
        pin_memory=pin,
        device=device,
    )
    return train, test


def folder_statistics(
    paths: list[Path], in_chans: int, source: str = "sample"
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The mean and std a streamed folder is normalised by (the DataSource's, which export records).

    `sample` (default): the folder's own, estimated from an evenly spread sample of its training images,
    as the device-resident path uses the set's own: the same folder trains alike whichever path `auto`
    picks, and a folder unlike ImageNet is still centred. `imagenet`: timm's defaults (DeiT's)."""
    if source == "imagenet":
        return (IMAGENET_MEAN, IMAGENET_STD) if in_chans == 3 else ((0.449,), (0.226,))  # timm's grey
    if source != "sample":
        raise ValueError(f"folder statistics come from 'sample' or 'imagenet', got {source!r}")
    return sampled_statistics(paths, in_chans)


def streamed_folder(
    recipe: DataRecipe,
    files: FolderSplits,
    in_chans: int,
    reason: str,
    rank: int,
    world_size: int,
    device: torch.device,
) -> DataSource:
    """A class-per-folder dataset streamed from disk, images at their own size until the crop."""
    if recipe.holdout_per_class is not None:
        raise ConfigError(STREAMED_HOLDOUT)
    labels = torch.tensor(files.train_labels)
    keep = stratified_subset(
        labels, recipe.train_fraction, recipe.per_class, recipe.seed, recipe.subset_order
    ).tolist()
    mean, std = folder_statistics([files.train_paths[i] for i in keep], in_chans)
    img_size = recipe.img_size or 224
    transforms = stream_recipe(recipe.augment, img_size, mean, std, in_chans)
    train_set = StreamingImages(
        [files.train_paths[i] for i in keep], labels[keep].tolist(), transforms.train_transform(), in_chans
    )
    test_set = StreamingImages(files.test_paths, files.test_labels, transforms.eval_transform(), in_chans)
    loaders = stream_loaders(recipe, train_set, test_set, rank, world_size, device)
    init_set = StreamingImages(train_set.source, train_set.labels, transforms.eval_transform(), in_chans)
    return DataSource(
        "stream",
        reason,
        *loaders,
        transforms.device_augment(True).to(device),
        transforms.device_augment(False).to(device),
        classes=files.classes,
        in_chans=in_chans,
        img_size=img_size,
        mean=mean,
        std=std,
        train_size=len(keep),
        init_set=init_set,
        crop_pct=recipe.augment.crop_pct,
    )
