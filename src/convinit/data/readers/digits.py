"""scikit-learn's bundled 8x8 digits: the embedded dataset that needs no network.

1,797 images of 8x8 pixels with values 0..16, scaled to 0..255. The split is fixed and stratified:
1,000 training and 797 test images (seed 0), so every run on `digits` sees the same test set.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path

import numpy as np

from convinit.data.datasets import DatasetInfo, Found, ImageDataset, KnownShape, register_dataset
from convinit.errors import DataError

TRAIN_SIZE = 1000


@functools.cache
def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) as read-only arrays, read once per process:
    scikit-learn parses its CSV in about a third of a second, and the demo opens the set 21 times."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # (1797, 1, 8, 8)
    labels = bunch.target.astype(np.int64)
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), train_size=TRAIN_SIZE, stratify=labels, random_state=0
    )
    parts = (
        images[np.sort(train_idx)],
        labels[np.sort(train_idx)],
        images[np.sort(test_idx)],
        labels[np.sort(test_idx)],
    )
    for part in parts:
        part.setflags(write=False)
    return parts


def read_digits(root: Path | None = None, download: bool = False) -> ImageDataset:
    import torch

    train_images, train_labels, test_images, test_labels = (
        torch.from_numpy(a.copy()) for a in digits_split()
    )
    return ImageDataset(
        name="digits",
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        classes=[str(i) for i in range(10)],
    )


def survey_digits(root: Path | None = None) -> Found:
    """What `convinit datasets` reports: the labels of scikit-learn's copy, read from its file without
    importing scikit-learn (seconds), so that the listing answers at once."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("digits ships with scikit-learn, which is not installed: pip install scikit-learn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    try:
        with gzip.open(path, "rt") as f:
            labels = [line.rsplit(",", 1)[-1].strip() for line in f if line.strip()]
    except OSError as exc:
        detail = exc.strerror or exc
        raise DataError(f"scikit-learn's digits file {path} cannot be read ({detail}); reinstall it") from exc
    return Found(len(set(labels)), TRAIN_SIZE, len(labels) - TRAIN_SIZE)


register_dataset(
    DatasetInfo(
        name="digits",
        mirror_keeps_class=False,
        reader=read_digits,
        how_to_obtain="it ships with scikit-learn (pip install scikit-learn)",
        needs_dir=False,
        survey=survey_digits,
        shape=KnownShape(num_classes=10, in_chans=1, side=8, train_images=1000),
    )
)
