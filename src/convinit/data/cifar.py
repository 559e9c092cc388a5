"""CIFAR-10 and CIFAR-100 from the real "python version" pickles.

The pickles are read with an unpickler that only admits the numpy array constructors the files use,
so a tampered file cannot run code. `download=True` fetches and checks the archive with torchvision.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from convinit.data.datasets import DatasetInfo, ImageDataset, data_home, register_dataset
from convinit.errors import DataError

# SPEC section 6: normalisation constants of the papers' code.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2471, 0.2435, 0.2616)

LAYOUTS = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "meta": "batches.meta",
        "label_key": b"labels",
        "names_key": b"label_names",
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "meta": "meta",
        "label_key": b"fine_labels",
        "names_key": b"fine_label_names",
    },
}
ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


class ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays; refuses every other global (no code execution)."""

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not a numpy array")


def load_batch(path: Path) -> dict:
    with open(path, "rb") as f:
        return ArrayOnlyUnpickler(f, encoding="bytes").load()


def dataset_folder(root: Path, name: str) -> Path:
    """Accept either the extracted folder itself or its parent."""
    folder = LAYOUTS[name]["folder"]
    return root if root.name == folder or (root / LAYOUTS[name]["meta"]).exists() else root / folder


def missing_cifar_files(name: str):
    def missing(root: Path) -> list[str]:
        layout = LAYOUTS[name]
        folder = dataset_folder(root, name)
        wanted = layout["train"] + layout["test"] + [layout["meta"]]
        return [f"{layout['folder']}/{f}" for f in wanted if not (folder / f).is_file()]

    return missing


def read_split(folder: Path, files: list[str], label_key: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for file in files:
        batch = load_batch(folder / file)
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DataError(
                f"{folder / file}: expected rows of 3072 bytes, got an array of shape {data.shape}"
            )
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[label_key], dtype=np.int64))
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def read_cifar(name: str, root: Path, download: bool) -> ImageDataset:
    layout = LAYOUTS[name]
    if download and missing_cifar_files(name)(root):
        from torchvision.datasets import CIFAR10, CIFAR100

        (CIFAR10 if name == "cifar10" else CIFAR100)(str(root), train=True, download=True)
    folder = dataset_folder(root, name)
    train_images, train_labels = read_split(folder, layout["train"], layout["label_key"])
    test_images, test_labels = read_split(folder, layout["test"], layout["label_key"])
    names = load_batch(folder / layout["meta"])[layout["names_key"]]
    return ImageDataset(
        name=name,
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        classes=[n.decode() if isinstance(n, bytes) else str(n) for n in names],
        mean=CIFAR_MEAN,
        std=CIFAR_STD,
    )


for _name in LAYOUTS:
    register_dataset(
        DatasetInfo(
            name=_name,
            reader=lambda root, download, _name=_name: read_cifar(_name, root, download),
            how_to_obtain=(
                f"extract the python version of {_name.upper()} ({LAYOUTS[_name]['folder']}/) there, "
                "set data_dir=..., or pass download=true"
            ),
            default_dir=lambda _name=_name: data_home() / _name,
            can_download=True,
            missing_in=missing_cifar_files(_name),
        )
    )
