"""scikit-learn's bundled 8x8 digits: the embedded dataset that needs no network.

1,797 images of 8x8 pixels with values 0..16, scaled to 0..255. The split is fixed and stratified:
1,000 training and 797 test images (seed 0), so every run on `digits` sees the same test set.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import zlib
from pathlib import Path

import numpy as np

from convinit.data.datasets import DatasetInfo, Found, ImageDataset, KnownShape, register_dataset
from convinit.errors import DataError

TRAIN_SIZE = 1000
IMAGES = 1797
# The fixed split, stored: scikit-learn's train_test_split(train_size=1000, stratify=labels, random_state=0)
# over the file's rows, which every digits result was trained and tested on. Stored so that reading
# digits imports no scikit-learn (a second and a half, a tenth of what `convinit demo --quick` spends
# outside training) and so that the test set cannot move with scikit-learn's version; a test recomputes it.
TRAIN_ROWS = (  # 1,797 bits, one per row of the file: 1 = a training image
    "37c7bb354a198f2ee6a992de289db2e125d7f1ecd54bff50d8d3e1f7cee769e1fe2fc6cd59ce015e6d3c610bbdd7b020"
    "4bbbe8d136bd311db5decf659ff9275a86145ecff6a7723a7a6fbde01f6feefab517fe0ee1fec95133f6fa05c969f33c"
    "447ac358592191bddbefd0342b97fa594602eded0d8e1abf4ed38fb163c810582de8beab37bfb79d565b6355abbe09a0"
    "7a9c11766c75306d12753a5dfaf9709ddef60dfd3e2e02732c37b6066af26931defd7ba7570a8dcc53c6de36b2333791"
    "759ecd2cd54d7cf64d51bfd25938da37108f7e27375bebad79cdb5ed6ac343e298"
)


def digits_file() -> Path:
    """scikit-learn's copy of the digits, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("digits ships with scikit-learn, which is not installed: pip install scikit-learn")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def read_table(path: Path) -> np.ndarray:
    """The file's (1797, 65) table: 64 pixel values 0..16 per row, then the label."""
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", ndmin=2)
    except (OSError, ValueError, EOFError, zlib.error) as exc:  # EOFError: a truncated gzip stream
        detail = getattr(exc, "strerror", None) or exc
        raise DataError(f"scikit-learn's digits file {path} cannot be read ({detail}); reinstall it") from exc
    if table.shape != (IMAGES, 65):
        raise DataError(
            f"scikit-learn's digits file {path} holds a {table.shape[0]}x{table.shape[1]} table, not the "
            f"{IMAGES} rows of 64 pixels and a label the fixed split was made on; reinstall scikit-learn"
        )
    problem = value_problem(table)
    if problem is not None:
        raise DataError(f"scikit-learn's digits file {path} {problem}; reinstall scikit-learn")
    return table


def value_problem(table: np.ndarray) -> str | None:
    """What in the table no digits file holds (a right shape says nothing of the values): pixels are whole
    numbers 0..16 and labels whole numbers 0..9; None when every value is one."""
    for what, values, top in (("pixel", table[:, :-1], 16), ("label", table[:, -1], 9)):
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 0) | (values > top)
        if bad.any():
            found = float(values[bad].flat[0])
            return f"holds a {what} of {found:g}, where every {what} is a whole number 0..{top}"
    return None


def train_rows() -> np.ndarray:
    """(1797,) bool: which rows of the file are the 1,000 training images."""
    bits = np.unpackbits(np.frombuffer(bytes.fromhex(TRAIN_ROWS), dtype=np.uint8))
    return bits[:IMAGES].astype(bool)


@functools.cache
def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) as read-only arrays, read once per process
    (the demo opens the set 21 times)."""
    table = read_table(digits_file())
    images = np.round(table[:, :-1].reshape(-1, 1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)
    labels = table[:, -1].astype(np.int64)
    train = train_rows()
    parts = (images[train], labels[train], images[~train], labels[~train])
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
    """What `convinit datasets` reports: the classes and split sizes of scikit-learn's copy, read from its
    file as training reads it (without importing scikit-learn), so that the listing answers at once."""
    table, train = read_table(digits_file()), train_rows()
    return Found(len(np.unique(table[:, -1])), int(train.sum()), int((~train).sum()))


register_dataset(
    DatasetInfo(
        name="digits",
        mirror_keeps_class=False,
        reader=read_digits,
        how_to_obtain="it ships with scikit-learn (pip install scikit-learn)",
        needs_dir=False,
        survey=survey_digits,
        shape=KnownShape(num_classes=10, in_chans=1, side=8, train_images=TRAIN_SIZE),
    )
)
