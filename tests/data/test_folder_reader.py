"""`folder`: a user's own class-per-folder images, in both layouts the reader accepts."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from convinit.data import load_dataset
from convinit.errors import DataError


def save_png(path: Path, value: int | tuple, size=(8, 8), mode: str = "RGB") -> np.ndarray:
    """A lossless image whose pixels encode `value`; returns its (H, W, C) array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    width, height = size
    img = Image.new(mode, (width, height), value)
    img.save(path)
    return np.array(img).reshape(height, width, -1)


def test_folder_with_train_and_test_subfolders_keeps_the_given_split(tmp_path):
    arrays = {}
    for split, n in (("train", 3), ("test", 2)):
        for label, name in enumerate(["cat", "dog"]):
            for i in range(n):
                colour = (10 * i, 100 + label, 7)
                arrays[split, name, i] = save_png(tmp_path / split / name / f"{i}.png", colour)
    ds = load_dataset("folder", tmp_path)
    assert ds.classes == ["cat", "dog"]
    assert ds.train_images.shape == (6, 3, 8, 8) and ds.test_images.shape == (4, 3, 8, 8)
    assert ds.train_labels.tolist() == [0, 0, 0, 1, 1, 1] and ds.test_labels.tolist() == [0, 0, 1, 1]
    expected = torch.from_numpy(arrays["train", "dog", 2]).permute(2, 0, 1)
    assert torch.equal(ds.train_images[5], expected)


def test_folder_with_val_instead_of_test_is_accepted(tmp_path):
    for split in ("train", "val"):
        for name in ("a", "b"):
            save_png(tmp_path / split / name / "0.png", (1, 2, 3))
    ds = load_dataset("folder", tmp_path)
    assert len(ds.train_labels) == 2 and len(ds.test_labels) == 2


def write_class_folders(root: Path, counts: dict[str, int]) -> None:
    for label, (name, n) in enumerate(counts.items()):
        for i in range(n):
            save_png(root / name / f"{i:03d}.png", (label * 40, i, 0))


def test_class_folders_only_are_split_80_20_stratified(tmp_path):
    write_class_folders(tmp_path, {"ant": 10, "bee": 20, "cow": 5})
    ds = load_dataset("folder", tmp_path)
    assert ds.classes == ["ant", "bee", "cow"]
    assert torch.bincount(ds.test_labels).tolist() == [2, 4, 1]
    assert torch.bincount(ds.train_labels).tolist() == [8, 16, 4]
    # no image is in both splits: the (class, index) code in the pixels is unique
    codes = lambda images: {tuple(im[:, 0, 0].tolist()) for im in images}  # noqa: E731
    assert not codes(ds.train_images) & codes(ds.test_images)
    assert len(codes(ds.train_images) | codes(ds.test_images)) == 35


def test_class_folders_split_puts_every_class_with_two_images_in_both_splits(tmp_path):
    write_class_folders(tmp_path, {"few": 2, "more": 3, "many": 9})
    ds = load_dataset("folder", tmp_path)
    assert (torch.bincount(ds.train_labels, minlength=3) > 0).all()
    assert (torch.bincount(ds.test_labels, minlength=3) > 0).all()


def test_class_folders_split_is_deterministic(tmp_path):
    write_class_folders(tmp_path, {"ant": 10, "bee": 10})
    first, second = load_dataset("folder", tmp_path), load_dataset("folder", tmp_path)
    assert torch.equal(first.test_images, second.test_images)
    assert torch.equal(first.train_labels, second.train_labels)


def test_all_grayscale_images_load_as_one_channel(tmp_path):
    for name in ("x", "y"):
        for i in range(5):
            save_png(tmp_path / name / f"{i}.png", 30 * i, mode="L")
    ds = load_dataset("folder", tmp_path)
    assert ds.in_chans == 1 and ds.train_images.shape[1:] == (1, 8, 8)
    assert len(ds.mean) == 1 and len(ds.std) == 1


def test_one_colour_image_among_grayscale_makes_all_three_channels(tmp_path):
    for name in ("a", "b", "c", "d"):  # more than 50 grayscale images come first in file order
        for i in range(25):
            save_png(tmp_path / name / f"{i:02d}.png", 10 * i, mode="L")
    save_png(tmp_path / "d" / "24.png", (200, 0, 0))  # the last class holds the only colour image
    ds = load_dataset("folder", tmp_path)
    assert ds.in_chans == 3
    everything = torch.cat([ds.train_images, ds.test_images])
    coloured = (everything[:, 0] != everything[:, 1]).flatten(1).any(dim=1)
    assert coloured.sum() == 1  # the colour image kept its colour; grey ones have R = G = B


def test_mixed_sizes_are_resized_to_the_most_common_size(tmp_path):
    for i in range(4):
        save_png(tmp_path / "train" / "a" / f"{i}.png", (9, 9, 9), size=(8, 6))  # 8 wide, 6 high
    save_png(tmp_path / "train" / "a" / "odd.png", (9, 9, 9), size=(20, 20))
    save_png(tmp_path / "test" / "a" / "0.png", (9, 9, 9), size=(16, 12))
    save_png(tmp_path / "train" / "b" / "0.png", (9, 9, 9), size=(8, 6))  # a classifier has two classes
    ds = load_dataset("folder", tmp_path)
    assert ds.train_images.shape == (6, 3, 6, 8) and ds.test_images.shape == (1, 3, 6, 8)
    assert (ds.train_images == 9).all() and (ds.test_images == 9).all()  # a solid colour survives resizing


def test_hidden_files_and_folders_are_not_images_or_classes(tmp_path):
    write_class_folders(tmp_path, {"a": 5, "b": 5})
    save_png(tmp_path / ".ipynb_checkpoints" / "0.png", (0, 0, 0))
    (tmp_path / "a" / "._000.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble metadata, not a PNG")
    ds = load_dataset("folder", tmp_path)
    assert ds.classes == ["a", "b"]
    assert len(ds.train_labels) + len(ds.test_labels) == 10


def test_folder_with_one_image_per_class_is_one_line_data_error(tmp_path):
    write_class_folders(tmp_path, {"a": 1, "b": 1})
    with pytest.raises(DataError) as excinfo:
        load_dataset("folder", tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and str(tmp_path) in message and "test" in message
