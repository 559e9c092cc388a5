"""Every way a dataset can be unusable gives exactly one line: what is wrong, where, and the remedy."""

from pathlib import Path

import pytest

from convinit.data import check_available, list_datasets, load_dataset
from convinit.errors import ConfigError, DataError

DIR_DATASETS = ["cifar10", "cifar100", "svhn", "tiny-imagenet", "mnist", "folder"]


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message and "\r" not in message
    return message


def test_every_registered_dataset_is_listed():
    assert {"digits", "fashion-mnist", *DIR_DATASETS} <= set(list_datasets())


def test_unknown_dataset_name_is_one_line_config_error_listing_choices():
    with pytest.raises(ConfigError) as excinfo:
        load_dataset("cifar-10")
    message = one_line(excinfo)
    assert "'cifar-10'" in message and "cifar10" in message and "digits" in message


@pytest.mark.parametrize("name", DIR_DATASETS)
def test_missing_directory_is_one_line_data_error_naming_it_and_data_dir(tmp_path, name):
    missing = tmp_path / "no" / "such" / "dir"
    for call in (check_available, load_dataset):
        with pytest.raises(DataError) as excinfo:
            call(name, missing)
        message = one_line(excinfo)
        assert str(missing) in message and "does not exist" in message and "data_dir" in message


@pytest.mark.parametrize("name", DIR_DATASETS)
def test_empty_directory_is_one_line_data_error_naming_what_is_missing(tmp_path, name):
    with pytest.raises(DataError) as excinfo:
        load_dataset(name, tmp_path)
    message = one_line(excinfo)
    assert str(tmp_path) in message and "lacks" in message and "data_dir" in message


@pytest.mark.parametrize(
    ("name", "present", "absent"),
    [
        ("svhn", ["train_32x32.mat"], "test_32x32.mat"),
        ("cifar10", ["cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/batches.meta"], "test_batch"),
        ("mnist", ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"], "t10k-images-idx3-ubyte"),
    ],
)
def test_one_missing_file_is_named_in_a_one_line_data_error(tmp_path, name, present, absent):
    for rel in present:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    with pytest.raises(DataError) as excinfo:
        load_dataset(name, tmp_path)
    message = one_line(excinfo)
    assert absent in message and str(tmp_path) in message
    assert all(Path(rel).name + "," not in message for rel in present)  # present files are not listed


def write_garbage(root: Path, files: list[str]) -> None:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"garbage\nwith a newline and \x00 bytes" * 3)


CORRUPT_CASES = {
    "svhn": ["train_32x32.mat", "test_32x32.mat"],
    "cifar10": [
        f"cifar-10-batches-py/{f}"
        for f in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]
    ],  # fmt: skip
    "cifar100": ["cifar-100-python/train", "cifar-100-python/test", "cifar-100-python/meta"],
    "mnist": [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte.gz",
    ],  # fmt: skip
    "tiny-imagenet": [
        "tiny-imagenet-200/wnids.txt",
        "tiny-imagenet-200/val/val_annotations.txt",
        "tiny-imagenet-200/val/images/val_0.JPEG",
        "tiny-imagenet-200/train/x",
    ],  # fmt: skip
    "folder": ["a/0.png", "a/1.png", "b/0.png", "b/1.png"],
}


@pytest.mark.parametrize("name", sorted(CORRUPT_CASES))
def test_corrupt_files_are_one_line_data_error_naming_the_path_and_a_remedy(tmp_path, name):
    write_garbage(tmp_path, CORRUPT_CASES[name])
    with pytest.raises(DataError) as excinfo:
        load_dataset(name, tmp_path)
    message = one_line(excinfo)
    assert str(tmp_path) in message
    assert any(word in message for word in ("re-download", "re-extract", "data_dir", "corrupt"))


def test_folder_without_data_dir_is_one_line_data_error_asking_for_it():
    for call in (check_available, load_dataset):
        with pytest.raises(DataError) as excinfo:
            call("folder")
        message = one_line(excinfo)
        assert "'folder'" in message and "data_dir=" in message


def test_digits_needs_no_directory():
    check_available("digits")  # raises nothing


def test_data_errors_are_oserrors_and_config_errors_are_valueerrors(tmp_path):
    with pytest.raises(OSError):
        load_dataset("svhn", tmp_path / "missing")
    with pytest.raises(ValueError):
        load_dataset("no-such-dataset")
