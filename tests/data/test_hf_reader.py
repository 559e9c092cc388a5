"""dataset=hf: image classification sets in the `datasets` format, built here with `datasets` itself."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from PIL import Image

from convinit.cli import main
from convinit.data import load_dataset
from convinit.errors import DataError

datasets = pytest.importorskip("datasets")

NAMES = [f"digit{i}" for i in range(10)]


def pil_images(images: torch.Tensor) -> list[Image.Image]:
    return [Image.fromarray(image[0].numpy()) for image in images]


def digits_split(digits, split: str, count: int):
    """The first `count` images of a digits split as a `datasets.Dataset` (Image + ClassLabel columns)."""
    images, labels = getattr(digits, f"{split}_images")[:count], getattr(digits, f"{split}_labels")[:count]
    features = datasets.Features({"picture": datasets.Image(), "digit": datasets.ClassLabel(names=NAMES)})
    return datasets.Dataset.from_dict(
        {"picture": pil_images(images), "digit": labels.tolist()}, features=features
    )


@pytest.fixture
def saved_dict(tmp_path, digits):
    """A DatasetDict with train and test splits saved with save_to_disk."""
    path = tmp_path / "saved"
    datasets.DatasetDict(
        train=digits_split(digits, "train", 60), test=digits_split(digits, "test", 30)
    ).save_to_disk(str(path))
    return path


def test_saved_dataset_dict_reads_images_labels_and_class_names(saved_dict, digits):
    data = load_dataset("hf", saved_dict)
    assert data.classes == NAMES
    assert torch.equal(data.train_images, digits.train_images[:60])
    assert torch.equal(data.train_labels, digits.train_labels[:60])
    assert torch.equal(data.test_images, digits.test_images[:30])
    assert torch.equal(data.test_labels, digits.test_labels[:30])


def test_a_dataset_without_test_split_holds_out_a_stratified_fraction_the_same_way_each_time(
    tmp_path, digits
):
    digits_split(digits, "train", 100).save_to_disk(str(tmp_path / "single"))
    first = load_dataset("hf", tmp_path / "single", hf_test_fraction=0.2)
    again = load_dataset("hf", tmp_path / "single", hf_test_fraction=0.2)
    assert torch.equal(first.test_images, again.test_images) and torch.equal(
        first.train_labels, again.train_labels
    )
    assert len(first.train_labels) + len(first.test_labels) == 100
    counts = torch.bincount(digits.train_labels[:100], minlength=10)
    held_out = torch.bincount(first.test_labels, minlength=10)
    assert torch.equal(held_out, torch.clamp((counts * 0.2).round().long(), min=1))
    pixels = {bytes(image.numpy()) for image in digits.train_images[:100]}
    assert all(bytes(image.numpy()) in pixels for image in torch.cat([first.train_images, first.test_images]))


def test_images_of_mixed_sizes_and_modes_load_at_the_most_common_size_in_rgb(tmp_path):
    grey = [Image.new("L", (8, 8), 40 * i) for i in range(4)]
    colour = [Image.new("RGB", (12, 10), (200, 10, 10)), Image.new("RGBA", (8, 8), (0, 0, 255, 255))]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    split = datasets.Dataset.from_dict(
        {"image": grey + colour, "label": [0, 1, 0, 1, 0, 1]}, features=features
    )
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(tmp_path / "mixed"))
    data = load_dataset("hf", tmp_path / "mixed")
    assert data.train_images.shape == (6, 3, 8, 8)
    assert data.train_images[4, :, 0, 0].tolist() == [200, 10, 10]  # resized, colours kept
    assert data.train_images[5, :, 0, 0].tolist() == [0, 0, 255]


def test_imagefolder_builder_reads_a_folder_of_class_folders(tmp_path, digits):
    for split, count in (("train", 20), ("test", 10)):
        for i in range(count):
            label = int(getattr(digits, f"{split}_labels")[i])
            folder = tmp_path / "pictures" / split / NAMES[label]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(getattr(digits, f"{split}_images")[i, 0].numpy()).save(folder / f"{i}.png")
    data = load_dataset("hf", tmp_path / "pictures", hf_name="imagefolder")
    assert data.classes == sorted({p.name for p in (tmp_path / "pictures").glob("*/*")})  # both splits
    assert len(data.train_labels) == 20 and len(data.test_labels) == 10
    truth = {bytes(digits.train_images[i].numpy()): NAMES[int(digits.train_labels[i])] for i in range(20)}
    named = [data.classes[int(y)] for y in data.train_labels]
    assert [truth[bytes(image.numpy())] for image in data.train_images] == named


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(hf_image_column="nope"), "no column 'nope'"),
        (dict(hf_label_column="picture"), "is not of type ClassLabel"),
        (dict(hf_image_column="digit"), "is not of type Image"),
        (dict(hf_split_train="training"), "no split 'training'"),
        (dict(hf_split_test="valid"), "no split 'valid'"),
        (dict(hf_test_fraction=1.0), "hf_test_fraction must be in (0, 1)"),
    ],
)
def test_a_bad_column_or_split_is_one_line_naming_the_fix(saved_dict, options, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_dataset("hf", saved_dict, **options)
    assert "\n" not in str(info.value)


def test_a_dataset_with_no_class_label_column_asks_for_hf_label_column(tmp_path):
    split = datasets.Dataset.from_dict(
        {"image": [Image.new("L", (4, 4))] * 2, "name": ["a", "b"]},
        features=datasets.Features({"image": datasets.Image(), "name": datasets.Value("string")}),
    )
    split.save_to_disk(str(tmp_path / "unlabelled"))
    with pytest.raises(DataError, match="none ClassLabel columns, not one; name it with hf_label_column"):
        load_dataset("hf", tmp_path / "unlabelled")


def test_cli_refuses_a_folder_not_written_by_save_to_disk_in_one_line(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    assert main(["train", "dataset=hf", f"data_dir={tmp_path / 'plain'}", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: dataset 'hf'") and "save_to_disk" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()  # refused before the run directory is made


def test_without_the_datasets_package_the_error_says_how_to_install_it(saved_dict, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ImportError
    assert main(["train", "dataset=hf", f"data_dir={saved_dict}", "--out", str(saved_dict.parent / "r")]) == 2
    assert 'pip install "convinit[hf]"' in capsys.readouterr().err


def test_datasets_command_says_how_to_point_hf_at_data(capsys):
    assert main(["datasets"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("hf "))
    assert "data_dir=" in line and "hf_name=" in line


def test_labels_outside_the_class_label_are_refused(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    split = datasets.Dataset.from_dict(
        {"image": [Image.new("L", (4, 4))] * 4, "label": [0, 1, -1, 0]}, features=features
    )
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(tmp_path / "unlabelled"))
    with pytest.raises(DataError, match=r"labels outside 0\.\.1"):
        load_dataset("hf", tmp_path / "unlabelled")
    assert np.all(np.asarray(split["label"]) <= 1)
