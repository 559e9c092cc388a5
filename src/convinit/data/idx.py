"""MNIST and Fashion-MNIST from their real IDX files (gzipped or not).

Fashion-MNIST defaults to /usr/share/datasets/fashion-mnist, where Debian's `dataset-fashion-mnist`
package puts it. The reader also looks in the `raw/` layouts that torchvision's downloader writes.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import torch

from convinit.data.datasets import DatasetInfo, ImageDataset, data_home, register_dataset
from convinit.errors import DataError

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


def read_idx(path: Path) -> np.ndarray:
    """Parse one IDX file: magic (0, 0, dtype 0x08 = ubyte, ndim), big-endian dims, then the bytes."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as exc:  # a truncated or damaged gzip stream, an unreadable file
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(f"{path} cannot be read ({detail}); truncated or corrupt, re-download it") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataError(f"{path} is not an unsigned-byte IDX file (bad magic number); re-download it")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path} ends inside its header; it is truncated, re-download it")
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + math.prod(dims)
    if len(data) != expected:
        raise DataError(f"{path} holds {len(data)} bytes but its header promises {expected}; re-download it")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def read_idx_dataset(name: str, root: Path, classes: list[str]) -> ImageDataset:
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


def read_mnist(root: Path, download: bool = False) -> ImageDataset:
    if download and missing_idx_files(root):
        from torchvision.datasets import MNIST

        download_with_torchvision(MNIST, root)
    return read_idx_dataset("mnist", root, [str(i) for i in range(10)])


def read_fashion_mnist(root: Path, download: bool = False) -> ImageDataset:
    if download and missing_idx_files(root):
        from torchvision.datasets import FashionMNIST

        download_with_torchvision(FashionMNIST, root)
    return read_idx_dataset("fashion-mnist", root, FASHION_CLASSES)


register_dataset(
    DatasetInfo(
        name="mnist",
        reader=read_mnist,
        how_to_obtain="put the four MNIST IDX files there, set data_dir=..., or pass download=true",
        default_dir=lambda: data_home() / "mnist",
        can_download=True,
        missing_in=missing_idx_files,
    )
)
register_dataset(
    DatasetInfo(
        name="fashion-mnist",
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
    )
)
