"""MNIST-format IDX files: fabricated ones in the real format, and the real Fashion-MNIST from Debian."""

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from convinit.data import load_dataset
from convinit.data.readers.idx import FASHION_CLASSES, FASHION_DEBIAN_DIR, read_idx
from convinit.errors import DataError

IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding as Yann LeCun's page defines it: big-endian magic, dims, then row-major bytes."""
    magic = (0x08 << 8) | array.ndim
    return struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_mnist(root: Path, n_train: int = 12, n_test: int = 5, gz: bool = True, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    root.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        data = idx_bytes(array)
        if gz:
            with gzip.open(root / (stem + ".gz"), "wb") as f:
                f.write(data)
        else:
            (root / stem).write_bytes(data)
    return arrays


def test_idx_encoding_uses_the_real_magic_numbers():
    assert idx_bytes(np.zeros((2, 28, 28), np.uint8))[:4] == struct.pack(">I", IMAGES_MAGIC)
    assert idx_bytes(np.zeros(2, np.uint8))[:4] == struct.pack(">I", LABELS_MAGIC)


@pytest.mark.parametrize("gz", [True, False], ids=["gzipped", "plain"])
def test_idx_reader_reads_fabricated_mnist_back_exactly(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    ds = load_dataset("mnist", tmp_path)
    assert torch.equal(ds.train_images, torch.from_numpy(arrays["train-images-idx3-ubyte"])[:, None])
    assert torch.equal(ds.train_labels, torch.from_numpy(arrays["train-labels-idx1-ubyte"]).long())
    assert torch.equal(ds.test_images, torch.from_numpy(arrays["t10k-images-idx3-ubyte"])[:, None])
    assert torch.equal(ds.test_labels, torch.from_numpy(arrays["t10k-labels-idx1-ubyte"]).long())
    assert ds.train_images.dtype == torch.uint8 and ds.train_labels.dtype == torch.int64
    assert ds.classes == [str(i) for i in range(10)] and ds.in_chans == 1


def test_idx_reader_finds_files_in_torchvision_raw_layout(tmp_path):
    arrays = write_mnist(tmp_path / "FashionMNIST" / "raw")
    ds = load_dataset("fashion-mnist", tmp_path)
    assert ds.classes == FASHION_CLASSES
    assert torch.equal(ds.test_images[:, 0], torch.from_numpy(arrays["t10k-images-idx3-ubyte"]))


def test_read_idx_keeps_row_major_pixel_order(tmp_path):
    image = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)  # non-square: rows and columns differ
    (tmp_path / "x-idx3-ubyte").write_bytes(idx_bytes(image))
    assert np.array_equal(read_idx(tmp_path / "x-idx3-ubyte"), image)


def one_line_error_naming(excinfo, path: Path) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    assert str(path) in message
    return message


@pytest.mark.parametrize("gz", [True, False], ids=["gzipped", "plain"])
def test_truncated_idx_file_is_one_line_data_error_naming_it(tmp_path, gz):
    write_mnist(tmp_path, gz=gz)
    path = tmp_path / ("train-images-idx3-ubyte" + (".gz" if gz else ""))
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(DataError) as excinfo:
        load_dataset("mnist", tmp_path)
    assert "re-download" in one_line_error_naming(excinfo, path)


def test_bad_idx_magic_number_is_one_line_data_error_naming_it(tmp_path):
    write_mnist(tmp_path, gz=False)
    path = tmp_path / "train-labels-idx1-ubyte"
    data = bytearray(path.read_bytes())
    data[0:4] = struct.pack("<I", LABELS_MAGIC)  # written little-endian: a classic mistake
    path.write_bytes(bytes(data))
    with pytest.raises(DataError) as excinfo:
        load_dataset("mnist", tmp_path)
    assert "magic" in one_line_error_naming(excinfo, path)


def test_non_gzip_data_under_gz_name_is_one_line_data_error(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(b"this is not gzip data at all")
    with pytest.raises(DataError) as excinfo:
        load_dataset("mnist", tmp_path)
    one_line_error_naming(excinfo, path)


def test_labels_file_under_images_name_is_one_line_data_error(tmp_path):
    arrays = write_mnist(tmp_path, gz=False)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(idx_bytes(arrays["t10k-labels-idx1-ubyte"]))
    with pytest.raises(DataError) as excinfo:
        load_dataset("mnist", tmp_path)
    one_line_error_naming(excinfo, path)


@pytest.fixture(scope="module")
def fashion():
    needed = ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz")
    if not all((FASHION_DEBIAN_DIR / f).is_file() for f in needed):
        pytest.skip(f"real Fashion-MNIST absent from {FASHION_DEBIAN_DIR}: apt install dataset-fashion-mnist")
    return load_dataset("fashion-mnist")


def test_real_fashion_mnist_has_60000_train_and_10000_test_images_28x28(fashion):
    assert fashion.train_images.shape == (60000, 1, 28, 28)
    assert fashion.test_images.shape == (10000, 1, 28, 28)
    assert fashion.train_images.dtype == torch.uint8


def test_real_fashion_mnist_has_its_ten_balanced_named_classes(fashion):
    assert fashion.classes == ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]  # fmt: skip
    assert torch.equal(torch.bincount(fashion.train_labels), torch.full((10,), 6000))
    assert torch.equal(torch.bincount(fashion.test_labels), torch.full((10,), 1000))


def test_real_fashion_mnist_statistics_match_the_published_ones(fashion):
    # widely quoted Fashion-MNIST training-set statistics: mean 0.2860, std 0.3530
    assert fashion.mean[0] == pytest.approx(0.2860, abs=1e-3)
    assert fashion.std[0] == pytest.approx(0.3530, abs=1e-3)
