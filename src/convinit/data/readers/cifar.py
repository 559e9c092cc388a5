"""CIFAR-10 and CIFAR-100 from the real "python version" pickles.

The pickles are read with an unpickler that only admits the numpy array constructors the files use
(and narrow stand-ins for the globals Python 3 writes bytes with at protocol 2), so a tampered file
cannot run code. `download=True` fetches and checks the archive with torchvision.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from convinit.data.datasets import DatasetInfo, ImageDataset, KnownShape, data_home, register_dataset
from convinit.errors import DataError
from convinit.system.torchvision_pair import import_torchvision

if TYPE_CHECKING:  # torch is imported where it is used: listing datasets needs none
    import torch

# docs/method.md §6: normalisation constants of the papers' code.
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
        "classes": 10,
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "meta": "meta",
        "label_key": b"fine_labels",
        "names_key": b"fine_label_names",
        "classes": 100,
    },
}
ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


def latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """Stands in for `_codecs.encode`, which Python 3 pickles bytes by at protocol 2 (str to latin-1 only)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("refusing _codecs.encode other than of a str to latin-1")
    return text.encode("latin1")


def empty_bytes(*args) -> bytes:
    """Stands in for `bytes()`, which Python 3 pickles an empty bytes object with at protocol 2."""
    if args:
        raise pickle.UnpicklingError("refusing bytes() with arguments")
    return b""


# Globals that are not numpy's but that protocol-2 pickles written by Python 3 use for bytes objects
# (the originals were written by Python 2, whose str needed none): replaced by narrow stand-ins.
BYTES_GLOBALS = {("_codecs", "encode"): latin1_bytes, ("builtins", "bytes"): empty_bytes}


class ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers, bytes and numpy arrays; refuses every other global (no code execution)."""

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if (module, name) in BYTES_GLOBALS:
            return BYTES_GLOBALS[module, name]
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not a numpy array")


def load_batch(path: Path) -> dict:
    """One CIFAR pickle as a dict with bytes keys; a corrupt or tampered file is one DataError."""
    try:
        with open(path, "rb") as f:
            batch = ArrayOnlyUnpickler(f, encoding="bytes").load()
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); re-extract the archive") from exc
    except Exception as exc:  # UnpicklingError, EOFError, ValueError... on a corrupt or tampered file
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(
            f"{path} is not a CIFAR python-version pickle ({detail}); re-extract the original archive"
        ) from exc
    if not isinstance(batch, dict):
        kind = type(batch).__name__
        raise DataError(f"{path} holds a {kind}, not a CIFAR batch dict; re-extract the archive")
    return batch


def batch_entry(batch: dict, key: bytes, path: Path):
    if key not in batch:
        raise DataError(f"{path} has no {key.decode()!r} entry; it is not a CIFAR batch of this dataset")
    return batch[key]


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
    import torch

    images, labels = [], []
    for file in files:
        batch = load_batch(folder / file)
        data = np.asarray(batch_entry(batch, b"data", folder / file), dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DataError(
                f"{folder / file}: expected rows of 3072 bytes, got an array of shape {data.shape}"
            )
        batch_labels = np.asarray(batch_entry(batch, label_key, folder / file), dtype=np.int64).reshape(-1)
        if len(batch_labels) != len(data):
            raise DataError(
                f"{folder / file}: {len(data)} images but {len(batch_labels)} labels; re-extract it"
            )
        images.append(data.reshape(-1, 3, 32, 32))  # row = 1024 red, 1024 green, 1024 blue bytes, row-major
        labels.append(batch_labels)
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def read_cifar(name: str, root: Path, download: bool) -> ImageDataset:
    layout = LAYOUTS[name]
    if download and missing_cifar_files(name)(root):
        import_torchvision("download=true")
        from torchvision.datasets import CIFAR10, CIFAR100

        (CIFAR10 if name == "cifar10" else CIFAR100)(str(root), train=True, download=True)
    folder = dataset_folder(root, name)
    train_images, train_labels = read_split(folder, layout["train"], layout["label_key"])
    test_images, test_labels = read_split(folder, layout["test"], layout["label_key"])
    meta = folder / layout["meta"]
    names = batch_entry(load_batch(meta), layout["names_key"], meta)
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
            mirror_keeps_class=True,
            shape=KnownShape(num_classes=LAYOUTS[_name]["classes"], in_chans=3, side=32, train_images=50000),
        )
    )
