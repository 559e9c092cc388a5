"""Hugging Face datasets (`dataset=hf`): any image classification set kept in the `datasets` format.

Where the data is: `data_dir=DIR` written by `save_to_disk`, or `hf_name=user/name` (a Hub dataset,
read from its cache when `HF_HUB_OFFLINE=1`) or a builder such as `hf_name=imagefolder data_dir=DIR`.
The image and label columns are found by their feature types (`Image`, `ClassLabel`) unless named with
`hf_image_column` / `hf_label_column`; class names come from the `ClassLabel`. Images of mixed sizes and
modes are decoded as the folder reader decodes them (most common size, RGB unless all are grayscale). A
dataset without a test split gets a stratified `hf_test_fraction` of its training split held out with a
fixed seed, so every run and every resume sees the same split.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from convinit.data.datasets import DatasetInfo, Found, ImageDataset, register_dataset
from convinit.data.image_files import ImageSource, all_grayscale, decode_images, decode_sample
from convinit.errors import DataError

INSTALL = 'pip install "convinit[hf]"'
TEST_SPLITS = ("test", "validation", "valid", "val")
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes (DatasetDict / Dataset)
OPTIONS = (
    "hf_name", "hf_config", "hf_split_train", "hf_split_test", "hf_test_fraction", "hf_image_column",
    "hf_label_column",
)  # fmt: skip


def require_datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise DataError(f"dataset 'hf' needs the datasets package: {INSTALL}") from exc
    return datasets


def check_hf(root: Path | None, hf_name: str | None = None, hf_test_fraction: float = 0.2, **_: Any) -> None:
    """What can be checked before any data is read: where the data is, the split fraction, the package
    (last: importing it takes seconds, and a listing should not pay that for a folder that is not one)."""
    if not 0 < hf_test_fraction < 1:
        raise DataError(f"hf_test_fraction must be in (0, 1), got {hf_test_fraction}")
    if hf_name is None and root is None:
        raise DataError(
            "dataset 'hf' needs data_dir=DIR (a dataset saved with save_to_disk) or hf_name=user/name"
        )
    if root is not None and not root.is_dir():
        raise DataError(f"dataset 'hf': {root} does not exist; pass the folder save_to_disk wrote")
    if hf_name is None and not any((root / marker).is_file() for marker in SAVED_MARKERS):
        raise DataError(
            f"dataset 'hf': {root} was not written by save_to_disk (no {' or '.join(SAVED_MARKERS)}); "
            "for a folder of class folders use dataset=folder, or hf_name=imagefolder"
        )
    if hf_name is None:
        refuse_empty_saved_splits(root)
    require_datasets()


def refuse_empty_saved_splits(root: Path) -> None:
    """A split saved with no rows has no data file, and `load_from_disk` fails on it with an IndexError:
    name the empty split instead (read from the folder's JSON, before anything is loaded)."""
    names = ["."]
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        names = [str(n) for n in json.loads((root / "dataset_dict.json").read_text())["splits"]]
    for name in names:
        state = {}
        with contextlib.suppress(OSError, ValueError):  # unreadable: load_from_disk says what is wrong
            state = json.loads((root / name / "state.json").read_text())
        if isinstance(state, dict) and state.get("_data_files") == []:
            split = "the dataset" if name == "." else f"split {name!r}"
            raise DataError(
                f"{split} of {root} holds no images (it was saved empty); a run needs training and test "
                "images: save the dataset again with rows in every split, or drop the empty one"
            )


def open_splits(root: Path | None, hf_name: str | None, hf_config: str | None) -> dict[str, Any]:
    """Every split of the dataset by name (a single saved Dataset is the split 'train')."""
    datasets = require_datasets()
    if hf_name is None:
        refuse_empty_saved_splits(root)
        loaded = datasets.load_from_disk(str(root))
    else:
        data_dir = str(root) if root is not None else None
        try:
            loaded = datasets.load_dataset(hf_name, hf_config, data_dir=data_dir)
        except Exception as exc:  # network, cache, builder and file errors all mean: this name is unreadable
            detail = " ".join(str(exc).split())[:300]
            raise DataError(
                f"hf_name={hf_name} could not be loaded ({type(exc).__name__}: {detail}); check the name and "
                "hf_config, or load it once while online (HF_HUB_OFFLINE=1 then reads the cache)"
            ) from exc
    return {"train": loaded} if isinstance(loaded, datasets.Dataset) else dict(loaded)


def pick_split(splits: dict[str, Any], name: str, key: str) -> Any:
    if name not in splits:
        raise DataError(f"the dataset has no split {name!r}; its splits are {', '.join(splits)}: set {key}=")
    return splits[name]


def pick_column(features: dict[str, Any], named: str | None, kind: type, key: str) -> str:
    """The column `named`, checked to be of feature type `kind`, or the dataset's only such column."""
    what = kind.__name__
    if named is not None:
        if named not in features:
            raise DataError(
                f"the dataset has no column {named!r}; its columns are {', '.join(features)}: set {key}="
            )
        if not isinstance(features[named], kind):
            raise DataError(
                f"column {named!r} is not of type {what} (it holds {features[named]}); set {key}= to one "
                f"of: {', '.join(c for c, f in features.items() if isinstance(f, kind)) or 'none'}"
            )
        return named
    found = [column for column, feature in features.items() if isinstance(feature, kind)]
    if len(found) != 1:
        which = f"{len(found)} ({', '.join(found)})" if found else "none"
        raise DataError(f"the dataset has {which} {what} columns, not one; name it with {key}=COLUMN")
    return found[0]


def image_sources(split: Any, column: str) -> list[ImageSource]:
    """Each row's encoded image (bytes) or file path, without decoding anything."""
    datasets = require_datasets()
    raw = split.cast_column(column, datasets.Image(decode=False))[column]
    sources: list[ImageSource] = []
    for row, entry in enumerate(raw):
        if entry is None or not (entry.get("bytes") or entry.get("path")):
            raise DataError(f"row {row} of column {column!r} holds no image; drop or fix that row")
        sources.append(entry["bytes"] or Path(entry["path"]))
    return sources


def held_out_split(labels: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices: `fraction` of each class (at least one of two or more) held out, seed 0."""
    rng = np.random.default_rng(0)
    test = []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        count = max(1, round(fraction * len(members))) if len(members) > 1 else 0
        test.append(members[:count])
    test_rows = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(len(labels)), test_rows), test_rows


def read_hf(
    root: Path | None,
    download: bool = False,
    hf_name: str | None = None,
    hf_config: str | None = None,
    hf_split_train: str = "train",
    hf_split_test: str | None = None,
    hf_test_fraction: float = 0.2,
    hf_image_column: str | None = None,
    hf_label_column: str | None = None,
) -> ImageDataset:
    import torch

    datasets = require_datasets()
    splits = open_splits(root, hf_name, hf_config)
    train = pick_split(splits, hf_split_train, "hf_split_train")
    if hf_split_test is None:
        hf_split_test = next((s for s in TEST_SPLITS if s in splits and s != hf_split_train), None)
    test = pick_split(splits, hf_split_test, "hf_split_test") if hf_split_test is not None else None
    image_column = pick_column(train.features, hf_image_column, datasets.Image, "hf_image_column")
    label_column = pick_column(train.features, hf_label_column, datasets.ClassLabel, "hf_label_column")
    classes = list(train.features[label_column].names)
    sources = image_sources(train, image_column)
    labels = np.asarray(train[label_column], dtype=np.int64)
    if test is None:
        train_rows, test_rows = held_out_split(labels, hf_test_fraction)
        test_sources, test_labels = [sources[i] for i in test_rows], labels[test_rows]
        sources, labels = [sources[i] for i in train_rows], labels[train_rows]
    else:
        for column in (image_column, label_column):
            if column not in test.features or type(test.features[column]) is not type(train.features[column]):
                raise DataError(f"split {hf_split_test!r} lacks the {column!r} column of {hf_split_train!r}")
        if list(test.features[label_column].names) != classes:
            raise DataError(f"splits {hf_split_train!r} and {hf_split_test!r} name different classes")
        test_sources = image_sources(test, image_column)
        test_labels = np.asarray(test[label_column], dtype=np.int64)
    for split, values in ((hf_split_train, labels), (hf_split_test or "held out", test_labels)):
        if len(values) == 0:
            raise DataError(f"split {split!r} holds no images; a run needs training and test images")
        if values.min() < 0 or values.max() >= len(classes):
            raise DataError(f"split {split!r} has labels outside 0..{len(classes) - 1} (unlabelled rows?)")
    grayscale = all_grayscale(sources + test_sources)
    train_images = decode_images(sources, grayscale=grayscale)
    return ImageDataset(
        name="hf",
        train_images=train_images,
        train_labels=torch.from_numpy(labels),
        test_images=decode_images(test_sources, size=tuple(train_images.shape[2:]), grayscale=grayscale),
        test_labels=torch.from_numpy(np.asarray(test_labels)),
        classes=classes,
    )


def survey_hf(root: Path) -> Found:
    """What `convinit datasets` reads of a saved dataset (default columns and splits, as a run without
    options reads it): the splits' sizes, the label column's classes and a sample of the images decoded."""
    datasets = require_datasets()
    splits = open_splits(root, None, None)
    train = pick_split(splits, "train", "hf_split_train")
    image_column = pick_column(train.features, None, datasets.Image, "hf_image_column")
    label_column = pick_column(train.features, None, datasets.ClassLabel, "hf_label_column")
    test = next((splits[s] for s in TEST_SPLITS if s in splits and s != "train"), None)
    n_train, n_test = len(train), len(test) if test is not None else 0
    if test is None:  # held out of train as a run holds it out
        n_test = len(held_out_split(np.asarray(train[label_column], dtype=np.int64), 0.2)[1])
        n_train -= n_test
    rows = np.linspace(0, len(train) - 1, min(len(train), 16)).astype(int).tolist()
    decoded = decode_sample(image_sources(train.select(rows), image_column))
    return Found(len(train.features[label_column].names), n_train, n_test, f"{decoded} decoded")


register_dataset(
    DatasetInfo(
        name="hf",
        reader=read_hf,
        how_to_obtain="set data_dir= to a dataset saved with save_to_disk, or hf_name=user/name",
        options=OPTIONS,
        check_options=check_hf,
        survey=survey_hf,
    )
)
