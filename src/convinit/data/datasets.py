"""The dataset registry and the in-memory dataset every reader returns.

Each reader module (one per on-disk format, in `convinit.data.readers`) registers its datasets with
`register_dataset`; the registry imports every module of that package the first time it is asked for a
name, so adding a dataset is adding one reader file. A reader returns whole splits as uint8 tensors
(N, C, H, W): small-data training keeps the full dataset on the training device, so there is no
per-image Python work during training.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convinit.errors import ConfigError, DataError
from convinit.naming.did_you_mean import suggestion
from convinit.naming.registry import Registry

if TYPE_CHECKING:  # torch is imported where it is used: listing datasets needs none
    import torch


@dataclass
class ImageDataset:
    """Both splits of a dataset as uint8 image tensors (N, C, H, W) and int64 labels."""

    name: str
    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    classes: list[str]
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.mean or not self.std:
            self.mean, self.std = channel_statistics(self.train_images)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def in_chans(self) -> int:
        return int(self.train_images.shape[1])

    @property
    def img_size(self) -> tuple[int, int]:
        return int(self.train_images.shape[2]), int(self.train_images.shape[3])


def channel_statistics(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 images, in [0, 1] units (computed in chunks to bound memory)."""
    import torch

    total = torch.zeros(images.shape[1], dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    for chunk in images.split(4096):
        x = chunk.double().div_(255)
        total += x.sum(dim=(0, 2, 3))
        total_sq += x.pow(2).sum(dim=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = (total_sq / count - mean**2).clamp_min(1e-12).sqrt()
    return tuple(mean.tolist()), tuple(std.tolist())


Reader = Callable[..., ImageDataset]  # (root, download, **options) -> ImageDataset


def files_missing(*names: str) -> Callable[[Path], list[str]]:
    """A `missing_in` check for readers that need fixed file names under the dataset directory."""
    return lambda root: [name for name in names if not (root / name).exists()]


@dataclass(frozen=True)
class KnownShape:
    """What a fixed-format dataset always holds, known without reading it: validation plans the model
    and sizes the largest batch from it before any data is decoded."""

    num_classes: int
    in_chans: int
    side: int  # images are side x side pixels
    train_images: int


@dataclass(frozen=True)
class Found:
    """What `convinit datasets` read of a dataset: classes and split sizes (and how much it decoded)."""

    classes: int
    train: int
    test: int
    note: str = ""

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.classes} classes, {self.train} train / {self.test} test images{note}"


@dataclass
class DatasetInfo:
    """A registered dataset: how to read it, where it lives by default and how to get it."""

    name: str
    reader: Reader
    how_to_obtain: str
    default_dir: Callable[[], Path | None] = lambda: None
    can_download: bool = False
    needs_dir: bool = True
    missing_in: Callable[[Path], list[str]] = field(default=lambda root: [])
    # config keys the reader takes as keyword arguments (e.g. hf_name for dataset=hf), and the check of
    # them that replaces the file check before any work (root may be None when a key names the data)
    options: tuple[str, ...] = ()
    check_options: Callable[..., None] | None = None
    shape: KnownShape | None = None  # None: known only once read (a folder, a Hub dataset)
    # what `convinit datasets` reads to say what is there (headers, labels, a sample of images; no torch);
    # None: the whole dataset is read
    survey: Callable[[Path | None], Found] | None = None
    # a dataset of image files: its files and labels listed without decoding any (a `FolderSplits`), so
    # that `data_mode=auto` can size it from headers and stream it from disk; None: decoded whole by `reader`
    list_files: Callable[[Path | None], Any] | None = None
    # whether a horizontal mirror keeps an image's class (clothes, objects: True; digits and house
    # numbers: False, a mirrored 2 or 7 is no digit); None: unknown (a user's folder, a Hub dataset)
    mirror_keeps_class: bool | None = None

    def resolve_dir(self, data_dir: str | Path | None) -> Path | None:
        if data_dir is not None:
            return Path(check_data_dir(data_dir)).expanduser()
        return self.default_dir()

    def missing_files(self, data_dir: str | Path | None) -> list[str]:
        """Files the reader needs that are not present (empty if the dataset is readable here)."""
        root = self.resolve_dir(data_dir)
        if root is None:
            return ["data_dir=..."] if self.needs_dir else []
        if not root.is_dir():
            return [str(root)]
        return self.missing_in(root)


def check_data_dir(data_dir: Any) -> str | os.PathLike | None:
    """`data_dir` as given if it is a path (or None); a number, boolean, list or mapping (what YAML makes
    of data_dir=123 or data_dir=[a]) is refused in one line rather than met by a TypeError."""
    if data_dir is None or isinstance(data_dir, (str, os.PathLike)):
        return data_dir
    scalar = isinstance(data_dir, (int, float)) and not isinstance(data_dir, bool)
    hint = f"; for a folder of that name write data_dir=./{data_dir}" if scalar else ""
    raise ConfigError(f"data_dir must be a folder path, got {data_dir!r} ({type(data_dir).__name__}){hint}")


def unknown_dataset(typed: str, names: list[str]) -> str:
    """The refusal of a dataset name: the closest names, then every name (there are few)."""
    return f"unknown dataset {typed!r}{suggestion(typed, names)} (choose one of: {', '.join(names)})"


# the readers register here; listing needs no torch, so no reader imports torch at module level
DATASETS: Registry[DatasetInfo] = Registry("dataset", "convinit.data.readers", unknown=unknown_dataset)


def register_dataset(info: DatasetInfo) -> DatasetInfo:
    return DATASETS.add(info.name, info)


def list_datasets() -> list[str]:
    return DATASETS.names()


def dataset_info(name: str) -> DatasetInfo:
    return DATASETS.get(name)


def data_home() -> Path:
    """Where datasets live unless `data_dir` is given: $CONVINIT_DATA or ~/.cache/convinit/datasets."""
    return Path(
        os.environ.get("CONVINIT_DATA", Path.home() / ".cache" / "convinit" / "datasets")
    ).expanduser()


def check_available(
    name: str, data_dir: str | Path | None = None, download: bool = False, **options: Any
) -> None:
    """Raise a one-line DataError if `name` cannot be read from `data_dir` (cheap: checks files only)."""
    info = dataset_info(name)
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        raise ConfigError(f"dataset {name!r} takes no option {', '.join(unknown)}")
    if info.check_options is not None:
        info.check_options(info.resolve_dir(data_dir), **options)
        return
    if download and info.can_download:
        return
    missing = info.missing_files(data_dir)
    if missing:
        root = info.resolve_dir(data_dir)
        if root is None:
            raise DataError(f"dataset {name!r} needs a directory: {info.how_to_obtain}")
        what = "does not exist" if missing == [str(root)] else f"lacks {', '.join(missing)}"
        raise DataError(f"dataset {name!r}: {root} {what}; {info.how_to_obtain}")


def unavailable(info: DatasetInfo, root: Path | None) -> str | None:
    """Why `info` cannot be read from `root`, in a few words; None if its files are there."""
    if not info.needs_dir:
        return None
    if info.check_options is None and root is None:
        return "set data_dir=DIR"
    if info.check_options is None and not root.is_dir():
        return "no such folder"
    try:
        if info.check_options is not None:
            info.check_options(root)
            return None
        missing = info.missing_in(root)
    except DataError as exc:
        return str(exc)
    more = f" and {len(missing) - 2} more" if len(missing) > 2 else ""
    return f"lacks {', '.join(missing[:2])}{more}" if missing else None


def survey_dataset(name: str, data_dir: str | Path | None = None) -> tuple[str, str, str]:
    """(status, place, what was found) for `convinit datasets`: `available` only once a sample of the
    data was read (classes, split sizes), `unusable` if that read failed, else `not found` and why.
    An embedded set (digits) is where it always is, whatever `data_dir` says."""
    check_data_dir(data_dir)  # for every set, embedded or not
    info = dataset_info(name)
    root = info.resolve_dir(data_dir) if info.needs_dir else None
    place = "(embedded)" if not info.needs_dir else str(root) if root is not None else "-"
    why = unavailable(info, root)
    if why is not None:
        return "not found", place, why
    try:
        if info.survey is not None:
            return "available", place, str(info.survey(root))
        dataset = load_dataset(name, root)
    except DataError as exc:
        return "unusable", place, str(exc)
    found = Found(dataset.num_classes, len(dataset.train_labels), len(dataset.test_labels))
    return "available", place, str(found)


def survey_datasets(data_dir: str | Path | None = None) -> tuple[str | None, list[tuple[str, str, str, str]]]:
    """`convinit datasets`: a line on what `data_dir` holds (None without one), and (name, status, place,
    what was found) per dataset. A dataset that does not read `data_dir` but has a place of its own (the
    system's Fashion-MNIST, a cache) is surveyed there: a user asking about their folder is not told that
    a dataset installed elsewhere is missing."""
    rows = []
    for name in list_datasets():
        status, place, found = survey_dataset(name, data_dir)
        if data_dir is not None and status == "not found" and dataset_info(name).default_dir() is not None:
            status, place, found = survey_dataset(name)
        rows.append((name, status, place, found))
    if data_dir is None:
        return None, rows
    folder = str(dataset_info("folder").resolve_dir(data_dir))
    here = [(name, status, found) for name, status, place, found in rows if place == folder]
    readers = [f"dataset={name}" for name, status, _ in here if status == "available"]
    unusable = [(name, found) for name, status, found in here if status == "unusable"]
    if readers:
        line = (
            f"{data_dir}: reads as {' or '.join(readers)} (train on it with {readers[0]} data_dir={data_dir})"
        )
    elif unusable:
        line = f"{data_dir}: dataset={unusable[0][0]} finds it unusable: {unusable[0][1]}"
    else:
        why = next((found for name, _, found in here if name == "folder"), "not a folder of class folders")
        line = f"{data_dir}: no dataset reads it (as dataset=folder: {why})"
    return line, rows


def load_dataset(
    name: str, data_dir: str | Path | None = None, download: bool = False, **options: Any
) -> ImageDataset:
    """Read dataset `name` whole into memory; any failure is one DataError naming path and remedy.

    `options` are the reader's own config keys (see `DatasetInfo.options`, e.g. hf_name=user/name).
    """
    info = dataset_info(name)
    check_available(name, data_dir, download, **options)
    root = info.resolve_dir(data_dir)
    if download and info.can_download and root is not None:
        root.mkdir(parents=True, exist_ok=True)
    try:
        dataset = info.reader(root, download, **options)
    except DataError:
        raise
    except Exception as exc:  # readers fail in many ways on corrupt files; the user needs one line
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(
            f"dataset {name!r} at {root} could not be read ({type(exc).__name__}: {detail}); "
            f"the files may be corrupt or incomplete: {info.how_to_obtain}"
        ) from exc
    check_contents(dataset, root)
    return dataset


def check_contents(dataset: ImageDataset, root: Path | None) -> None:
    """Refuse, before any training, a dataset with an empty split or labels outside its classes."""
    where = f"dataset {dataset.name!r}" + (f" at {root}" if root is not None else "")
    for split in ("train", "test"):
        images, labels = getattr(dataset, f"{split}_images"), getattr(dataset, f"{split}_labels")
        if len(images) == 0:
            raise DataError(f"{where} holds 0 {split} images; point data_dir at a complete copy")
        bad = labels[(labels < 0) | (labels >= dataset.num_classes)]
        if len(bad):
            raise DataError(
                f"{where}: {split} label {int(bad[0])} is outside its {dataset.num_classes} classes "
                f"(0..{dataset.num_classes - 1}; {len(bad)} such labels); the files are corrupt, "
                "re-download them"
            )
    refuse_one_class(dataset.classes, dataset.train_labels.unique().tolist(), where)


def refuse_one_class(classes: list[str], trained: list[int], where: str) -> None:
    """A classifier needs two classes or more in its training images: one class would train to a
    100 % that says nothing (refused before any step)."""
    present = sorted(set(trained))
    if len(classes) < 2 or len(present) < 2:
        names = ", ".join(classes[i] for i in present if 0 <= i < len(classes)) or "none"
        raise DataError(
            f"{where} holds training images of {len(present)} class ({names}); a classifier needs at "
            "least two: add a folder of images per class"
        )
