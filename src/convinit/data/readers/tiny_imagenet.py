"""Tiny-ImageNet-200 in its real layout: 200 classes of 64x64 JPEGs; the labelled val split is the test.

tiny-imagenet-200/wnids.txt, words.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG and
val/val_annotations.txt (file, wnid, box). Decoding 110,000 JPEGs takes a minute or two on a CPU.
"""

from __future__ import annotations

from pathlib import Path

from convinit.data.datasets import DatasetInfo, ImageDataset, KnownShape, data_home, register_dataset
from convinit.data.image_files import decode_images
from convinit.errors import DataError
from convinit.system.torchvision_pair import import_torchvision

FOLDER = "tiny-imagenet-200"
URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
NEEDED = ["wnids.txt", "train", "val/images", "val/val_annotations.txt"]


def dataset_folder(root: Path) -> Path:
    return root if (root / "wnids.txt").exists() else root / FOLDER


def missing_tiny_files(root: Path) -> list[str]:
    folder = dataset_folder(root)
    return [f"{FOLDER}/{name}" for name in NEEDED if not (folder / name).exists()]


def read_tiny_imagenet(root: Path, download: bool = False) -> ImageDataset:
    import torch

    if download and missing_tiny_files(root):
        import_torchvision("download=true")
        from torchvision.datasets.utils import download_and_extract_archive

        download_and_extract_archive(URL, str(root))
    folder = dataset_folder(root)
    wnids = (folder / "wnids.txt").read_text().split()
    if not wnids:
        raise DataError(f"{folder / 'wnids.txt'} lists no classes; re-extract the archive")
    index = {wnid: i for i, wnid in enumerate(wnids)}
    words = {}
    if (folder / "words.txt").exists():
        for line in (folder / "words.txt").read_text().splitlines():
            wnid, _, text = line.partition("\t")
            words[wnid] = text.split(",")[0].strip()
    train_paths, train_labels = [], []
    for wnid in wnids:
        files = sorted((folder / "train" / wnid / "images").glob("*.JPEG"))
        if not files:
            raise DataError(
                f"{folder / 'train' / wnid / 'images'} holds no JPEG files; re-extract the archive"
            )
        train_paths += files
        train_labels += [index[wnid]] * len(files)
    test_paths, test_labels = [], []
    for line in (folder / "val" / "val_annotations.txt").read_text().splitlines():
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise DataError(f"{folder / 'val' / 'val_annotations.txt'}: unreadable line {line[:60]!r}")
        test_paths.append(folder / "val" / "images" / fields[0])
        test_labels.append(index[fields[1]])
    return ImageDataset(
        name="tiny-imagenet",
        train_images=decode_images(train_paths, size=(64, 64)),
        train_labels=torch.tensor(train_labels),
        test_images=decode_images(test_paths, size=(64, 64)),
        test_labels=torch.tensor(test_labels),
        classes=[words.get(w, w) for w in wnids],
    )


register_dataset(
    DatasetInfo(
        name="tiny-imagenet",
        reader=read_tiny_imagenet,
        how_to_obtain=f"extract {FOLDER}.zip there, set data_dir=..., or pass download=true",
        default_dir=lambda: data_home() / "tiny-imagenet",
        can_download=True,
        missing_in=missing_tiny_files,
        mirror_keeps_class=True,
        shape=KnownShape(num_classes=200, in_chans=3, side=64, train_images=100000),
    )
)
