"""SVHN cropped digits from fabricated train_32x32.mat / test_32x32.mat (X (32, 32, 3, N), y (N, 1))."""

from pathlib import Path

import numpy as np
import pytest
import torch

from convinit.data import load_dataset
from convinit.data.readers.svhn import SVHN_MEAN, SVHN_STD
from convinit.errors import DataError


def write_svhn(root: Path, n_train: int = 12, n_test: int = 5) -> dict:
    from scipy.io import savemat

    rng = np.random.default_rng(0)
    written = {}
    for name, n in (("train_32x32.mat", n_train), ("test_32x32.mat", n_test)):
        X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)  # (H, W, C, N) as in the real files
        y = np.concatenate([np.arange(1, 11), rng.integers(1, 11, n)])[:n]  # every digit when n >= 10
        y = y.astype(np.uint8).reshape(n, 1)  # digit 0 is stored as 10
        savemat(root / name, {"X": X, "y": y})
        written[name] = (X, y)
    return written


def test_svhn_reader_reads_fabricated_mat_files_back(tmp_path):
    written = write_svhn(tmp_path)
    ds = load_dataset("svhn", tmp_path)
    assert ds.train_images.shape == (12, 3, 32, 32) and ds.test_images.shape == (5, 3, 32, 32)
    assert ds.train_images.dtype == torch.uint8 and ds.train_labels.dtype == torch.int64
    assert ds.classes == [str(d) for d in range(10)]
    assert ds.mean == SVHN_MEAN and ds.std == SVHN_STD
    X, _ = written["test_32x32.mat"]
    assert torch.equal(ds.test_images, torch.from_numpy(X).permute(3, 2, 0, 1))


def test_svhn_label_10_means_digit_0_and_others_are_kept(tmp_path):
    written = write_svhn(tmp_path)
    ds = load_dataset("svhn", tmp_path)
    stored = written["train_32x32.mat"][1].reshape(-1).astype(np.int64)
    assert ds.train_labels.tolist() == [0 if v == 10 else int(v) for v in stored]
    assert 0 in ds.train_labels.tolist() and int(ds.train_labels.max()) == 9


def test_svhn_pixel_layout_maps_x_h_w_c_n_to_image_n_c_h_w(tmp_path):
    from scipy.io import savemat

    X = np.zeros((32, 32, 3, 2), np.uint8)
    X[:, :, 0, 1] = np.arange(32)[:, None]  # image 1, red channel: value = row
    X[:, :, 1, 1] = 100 + np.arange(32)[None, :]  # image 1, green channel: value = 100 + column
    X[:, :, 2, 1] = 250
    for name in ("train_32x32.mat", "test_32x32.mat"):
        savemat(tmp_path / name, {"X": X, "y": np.array([[10], [3]], np.uint8)})
    image = load_dataset("svhn", tmp_path).train_images[1].long()
    rows, cols = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
    assert torch.equal(image[0], rows)
    assert torch.equal(image[1], 100 + cols)
    assert torch.equal(image[2], torch.full((32, 32), 250))


def test_svhn_mat_without_x_and_y_is_one_line_data_error(tmp_path):
    from scipy.io import savemat

    write_svhn(tmp_path)
    savemat(tmp_path / "test_32x32.mat", {"images": np.zeros((2, 2), np.uint8)})
    with pytest.raises(DataError) as excinfo:
        load_dataset("svhn", tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and str(tmp_path / "test_32x32.mat") in message
