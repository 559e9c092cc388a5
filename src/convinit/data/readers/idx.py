"""MNIST and Fashion-MNIST from their real IDX files (gzipped or not).

Fashion-MNIST defaults to /usr/share/datasets/fashion-mnist, where Debian's `dataset-fashion-mnist`
package puts it. The reader also looks in the `raw/` layouts that torchvision's downloader writes.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from convinit.data.datasets import DatasetInfo, Found, ImageDataset, KnownShape, data_home, register_dataset
from convinit.errors import DataError
from convinit.system.torchvision_pair import import_torchvision

SPLIT_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
FASHION_CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip
FASHION_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


def find_idx_file(root: Path, stem: str) -> Path | None:
    """`stem` or `stem.gz` in root or in torchvision's raw/ subfolders."""
    for folder in (root, root / "raw", root / "MNIST" / "raw", root / "FashionMNIST" / "raw"):
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return folder / name
    return None


def missing_idx_files(root: Path) -> list[str]:
    return [stem + "[.gz]" for stem in SPLIT_FILES.values() if find_idx_file(root, stem) is None]


MAX_IDX_BYTES = 2 << 30  # an IDX file may hold at most 2 GiB once decompressed (MNIST's largest: 47 MB)


def read_idx_header(path: Path, f: BinaryIO) -> tuple[int, ...]:
    """The dims of an open IDX stream, read from its header."""
    magic = f.read(4)
    if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[2] != 0x08:
        raise DataError(f"{path} is not an unsigned-byte IDX file (bad magic number); re-download it")
    ndim = magic[3]
    raw_dims = f.read(4 * ndim)
    if len(raw_dims) < 4 * ndim:
        raise DataError(f"{path} ends inside its header; it is truncated, re-download it")
    return tuple(int.from_bytes(raw_dims[4 * i : 4 * i + 4], "big") for i in range(ndim))


def read_idx_stream(path: Path, f: BinaryIO) -> tuple[tuple[int, ...], bytes]:
    """Dims and data of an open IDX stream, reading no more than its header promises (plus one byte
    to find trailing data): a gzip bomb is refused after its header, not after inflating it whole."""
    dims = read_idx_header(path, f)
    header, size = 4 + 4 * len(dims), math.prod(dims)
    if size > MAX_IDX_BYTES:
        raise DataError(
            f"{path}: its header promises {size} bytes of data, over the {MAX_IDX_BYTES >> 30} GiB limit "
            "of an IDX file; it is not an MNIST-style dataset file"
        )
    data = f.read(size + 1)
    if len(data) != size:
        found = f"more than {header + size}" if len(data) > size else str(header + len(data))
        raise DataError(f"{path} holds {found} bytes but its header promises {header + size}; re-download it")
    return dims, data


def read_idx(path: Path, header_only: bool = False) -> np.ndarray | tuple[int, ...]:
    """Parse one IDX file: magic (0, 0, dtype 0x08 = ubyte, ndim), big-endian dims, then the bytes (or,
    with `header_only`, just the dims)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            if header_only:
                return read_idx_header(path, f)
            dims, data = read_idx_stream(path, f)
    except (OSError, EOFError) as exc:  # a truncated or damaged gzip stream, an unreadable file
        if isinstance(exc, DataError):
            raise
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(f"{path} cannot be read ({detail}); truncated or corrupt, re-download it") from exc
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def read_idx_dataset(name: str, root: Path, classes: list[str]) -> ImageDataset:
    import torch

    arrays = {}
    for key, stem in SPLIT_FILES.items():
        path = find_idx_file(root, stem)
        if path is None:
            raise DataError(f"dataset {name!r}: {root} lacks {stem}[.gz]")
        arrays[key] = read_idx(path)
        wanted_ndim = 3 if key.endswith("images") else 1  # images (N, rows, cols), labels (N,)
        if arrays[key].ndim != wanted_ndim:
            raise DataError(
                f"{path} has {arrays[key].ndim} dimensions, not {wanted_ndim}: it is not an IDX "
                f"{key.split('_')[1][:-1]} file; put the right file under that name"
            )
    for split in ("train", "test"):
        n_images, n_labels = len(arrays[f"{split}_images"]), len(arrays[f"{split}_labels"])
        if n_images != n_labels:
            raise DataError(
                f"dataset {name!r} in {root}: {split} has {n_images} images but {n_labels} labels"
            )
    return ImageDataset(
        name=name,
        train_images=torch.from_numpy(arrays["train_images"].copy())[:, None],
        train_labels=torch.from_numpy(arrays["train_labels"].astype(np.int64)),
        test_images=torch.from_numpy(arrays["test_images"].copy())[:, None],
        test_labels=torch.from_numpy(arrays["test_labels"].astype(np.int64)),
        classes=classes,
    )


def download_with_torchvision(dataset_class, root: Path) -> None:
    for train in (True, False):
        dataset_class(str(root), train=train, download=True)


def survey_idx(num_classes: int) -> Callable[[Path], Found]:
    """What `convinit datasets` reads of an IDX set: both label files whole, the image files' headers."""

    def survey(root: Path) -> Found:
        counts = []
        for split in ("train", "test"):
            labels = read_idx(find_idx_file(root, SPLIT_FILES[f"{split}_labels"]))
            dims = read_idx(find_idx_file(root, SPLIT_FILES[f"{split}_images"]), header_only=True)
            if len(dims) != 3 or dims[0] != len(labels) or labels.ndim != 1:
                raise DataError(f"{root}: the {split} images {dims} and labels {labels.shape} do not match")
            if len(labels) and int(labels.max()) >= num_classes:
                raise DataError(f"{root}: {split} label {int(labels.max())} is outside {num_classes} classes")
            counts.append(len(labels))
        return Found(num_classes, *counts, note="labels read, image headers checked")

    return survey


def read_mnist(root: Path, download: bool = False) -> ImageDataset:
    if download and missing_idx_files(root):
        import_torchvision("download=true")
        from torchvision.datasets import MNIST

        download_with_torchvision(MNIST, root)
    return read_idx_dataset("mnist", root, [str(i) for i in range(10)])


def read_fashion_mnist(root: Path, download: bool = False) -> ImageDataset:
    if download and missing_idx_files(root):
        import_torchvision("download=true")
        from torchvision.datasets import FashionMNIST

        download_with_torchvision(FashionMNIST, root)
    return read_idx_dataset("fashion-mnist", root, FASHION_CLASSES)


register_dataset(
    DatasetInfo(
        name="mnist",
        mirror_keeps_class=False,
        reader=read_mnist,
        how_to_obtain="put the four MNIST IDX files there, set data_dir=..., or pass download=true",
        default_dir=lambda: data_home() / "mnist",
        can_download=True,
        missing_in=missing_idx_files,
        shape=KnownShape(num_classes=10, in_chans=1, side=28, train_images=60000),
        survey=survey_idx(10),
    )
)
register_dataset(
    DatasetInfo(
        name="fashion-mnist",
        mirror_keeps_class=True,
        reader=read_fashion_mnist,
        how_to_obtain=(
            "install it with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu), "
            "set data_dir=... to a folder with the four IDX files, or pass download=true"
        ),
        default_dir=lambda: (
            FASHION_DEBIAN_DIR if FASHION_DEBIAN_DIR.is_dir() else data_home() / "fashion-mnist"
        ),
        can_download=True,
        missing_in=missing_idx_files,
        shape=KnownShape(num_classes=10, in_chans=1, side=28, train_images=60000),
        survey=survey_idx(len(FASHION_CLASSES)),
    )
)
