"""Any class-per-folder image collection: bring your own small dataset.

Layout: DIR/train/<class>/*.png and DIR/test/<class>/* (or val/); or just DIR/<class>/*, which is then
split 80/20, stratified with a fixed seed. Images are decoded once; all share the most common size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convinit.data.datasets import DatasetInfo, Found, ImageDataset, refuse_one_class, register_dataset
from convinit.data.image_files import all_grayscale, decode_images, decode_sample, image_files
from convinit.errors import DataError

TEST_FRACTION = 0.2


def class_folders(root: Path) -> list[Path]:
    """Sub-folders of `root`, sorted; hidden ones (such as `.ipynb_checkpoints`) are not classes.

    A folder that links back to `root` or above it (a symlink loop) or into another class would make
    a class of other classes' images: refused.
    """
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    resolved = {p: p.resolve() for p in folders}
    for folder, target in resolved.items():
        loops = root.resolve().is_relative_to(target)
        inside = [o for o, t in resolved.items() if o != folder and t.is_relative_to(target)]
        if loops or inside:
            what = f"leads back to {root} (a symlink loop)" if loops else f"contains class {inside[0].name}"
            raise DataError(f"class folder {folder} {what}; remove that link so each image has one class")
    return folders


def labelled_files(split_dir: Path, classes: list[str]) -> tuple[list[Path], list[int]]:
    paths, labels = [], []
    for label, name in enumerate(classes):
        files = image_files(split_dir / name) if (split_dir / name).is_dir() else []
        paths += files
        labels += [label] * len(files)
    return paths, labels


def split_dirs(root: Path) -> tuple[Path, Path] | None:
    test = next((root / n for n in ("test", "val") if (root / n).is_dir()), None)
    return (root / "train", test) if (root / "train").is_dir() and test is not None else None


def missing_folder_files(root: Path) -> list[str]:
    if split_dirs(root):  # before the run starts: a class only in test/ is a mistake in the folder
        train_dir, test_dir = split_dirs(root)
        refuse_classes_only_in_test(train_dir, test_dir, [p.name for p in class_folders(train_dir)])
    base = split_dirs(root)[0] if split_dirs(root) else root
    has_images = any(image_files(folder) for folder in class_folders(base))
    return [] if has_images else ["class folders with images (DIR/<class>/*.png or DIR/train/<class>/...)"]


@dataclass
class FolderSplits:
    """The files of a class-per-folder dataset, split, before any decoding (the streamed path reads these)."""

    classes: list[str]
    train_paths: list[Path]
    train_labels: list[int]
    test_paths: list[Path]
    test_labels: list[int]


def refuse_classes_only_in_test(train_dir: Path, test_dir: Path, classes: list[str]) -> None:
    """Test images of a class that train/ lacks could never be predicted: refused, never dropped."""
    extra = {
        folder.name: len(image_files(folder))
        for folder in class_folders(test_dir)
        if folder.name not in classes and image_files(folder)
    }
    if extra:
        shown = ", ".join(f"{name} ({count} images)" for name, count in list(extra.items())[:3])
        raise DataError(
            f"{test_dir} holds classes that {train_dir} lacks: {shown}; the model cannot learn them: add "
            f"training images of those classes to {train_dir}, or remove them from {test_dir}"
        )


def folder_splits(root: Path) -> FolderSplits:
    """List DIR/train + DIR/test (or val), or split DIR/<class> 80/20 per class with a fixed seed."""
    splits = split_dirs(root)
    classes = [p.name for p in class_folders(splits[0] if splits else root)]
    if splits:
        refuse_classes_only_in_test(*splits, classes)
        train_paths, train_labels = labelled_files(splits[0], classes)
        test_paths, test_labels = labelled_files(splits[1], classes)
    else:
        paths, labels = labelled_files(root, classes)
        rng = np.random.default_rng(0)
        train_paths, train_labels, test_paths, test_labels = [], [], [], []
        for label in range(len(classes)):
            members = [i for i, y in enumerate(labels) if y == label]
            rng.shuffle(members)
            # every class with two or more images gets at least one test image
            n_test = max(1, round(TEST_FRACTION * len(members))) if len(members) > 1 else 0
            for rank, i in enumerate(members):
                (test_paths if rank < n_test else train_paths).append(paths[i])
                (test_labels if rank < n_test else train_labels).append(label)
    if not train_paths or not test_paths:
        raise DataError(f"{root}: need images in both a training and a test split (found {len(train_paths)} "
                        f"and {len(test_paths)}); add more images per class or a test/ folder")  # fmt: skip
    refuse_one_class(classes, train_labels, f"dataset 'folder' at {root}")
    return FolderSplits(classes, train_paths, train_labels, test_paths, test_labels)


def read_folder(root: Path, download: bool = False) -> ImageDataset:
    import torch

    files = folder_splits(root)
    classes, train_paths, train_labels = files.classes, files.train_paths, files.train_labels
    test_paths, test_labels = files.test_paths, files.test_labels
    grayscale = all_grayscale(train_paths + test_paths)  # headers only: cheap, and no class is missed
    train_images = decode_images(train_paths, grayscale=grayscale)
    test_images = decode_images(test_paths, size=tuple(train_images.shape[2:]), grayscale=grayscale)
    return ImageDataset(
        name="folder",
        train_images=train_images,
        train_labels=torch.tensor(train_labels),
        test_images=test_images,
        test_labels=torch.tensor(test_labels),
        classes=classes,
    )


def survey_folder(root: Path) -> Found:
    """What `convinit datasets` reads of a folder: its files listed and split as a run splits them, and a
    sample of them decoded."""
    files = folder_splits(root)
    decoded = decode_sample(files.train_paths + files.test_paths)
    return Found(len(files.classes), len(files.train_paths), len(files.test_paths), f"{decoded} decoded")


register_dataset(
    DatasetInfo(
        name="folder",
        reader=read_folder,
        how_to_obtain=(
            "set data_dir=... to a folder of class folders (DIR/<class>/*.png or DIR/train, test); for "
            "other files name their dataset= (`convinit datasets data_dir=DIR` says which reads them)"
        ),
        missing_in=missing_folder_files,
        survey=survey_folder,
        list_files=folder_splits,
    )
)
