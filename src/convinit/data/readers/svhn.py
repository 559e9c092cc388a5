"""SVHN (cropped digits) from the real `train_32x32.mat` / `test_32x32.mat` files.

In the .mat files X is (32, 32, 3, N) and y is (N, 1) with the digit 0 stored as label 10.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from convinit.data.datasets import (
    DatasetInfo,
    ImageDataset,
    KnownShape,
    data_home,
    files_missing,
    register_dataset,
)
from convinit.errors import DataError
from convinit.system.torchvision_pair import import_torchvision

if TYPE_CHECKING:  # torch is imported where it is used: listing datasets needs none
    import torch

SVHN_MEAN = (0.4377, 0.4438, 0.4728)  # docs/method.md §6
SVHN_STD = (0.1980, 0.2010, 0.1970)
FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}


def read_mat(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    import torch
    from scipy.io import loadmat

    try:
        mat = loadmat(str(path))
    except Exception as exc:  # scipy raises ValueError, IndexError, NotImplementedError (v7.3)...
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(
            f"{path} is not a readable MATLAB file ({type(exc).__name__}: {detail}); re-download it"
        ) from exc
    if "X" not in mat or "y" not in mat:
        raise DataError(f"{path} has no 'X' and 'y' arrays; it is not an SVHN cropped-digits file")
    images = np.ascontiguousarray(np.transpose(mat["X"], (3, 2, 0, 1))).astype(np.uint8)  # (N, 3, 32, 32)
    labels = mat["y"].astype(np.int64).reshape(-1) % 10  # label 10 means digit 0
    if len(images) != len(labels):
        raise DataError(f"{path}: {len(images)} images but {len(labels)} labels")
    return torch.from_numpy(images), torch.from_numpy(labels)


def read_svhn(root: Path, download: bool = False) -> ImageDataset:
    if download and files_missing(*FILES.values())(root):
        import_torchvision("download=true")
        from torchvision.datasets import SVHN

        for split in FILES:
            SVHN(str(root), split=split, download=True)
    train_images, train_labels = read_mat(root / FILES["train"])
    test_images, test_labels = read_mat(root / FILES["test"])
    return ImageDataset(
        name="svhn",
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        classes=[str(i) for i in range(10)],
        mean=SVHN_MEAN,
        std=SVHN_STD,
    )


register_dataset(
    DatasetInfo(
        name="svhn",
        mirror_keeps_class=False,
        reader=read_svhn,
        how_to_obtain="put train_32x32.mat and test_32x32.mat there, set data_dir=..., or pass download=true",
        default_dir=lambda: data_home() / "svhn",
        can_download=True,
        missing_in=files_missing(*FILES.values()),
        shape=KnownShape(num_classes=10, in_chans=3, side=32, train_images=73257),
    )
)
