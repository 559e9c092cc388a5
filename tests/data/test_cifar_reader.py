"""CIFAR-10/100 from fabricated "python version" pickles in the real folder names and formats.

The originals were written by Python 2's cPickle at protocol 2: dicts whose keys and strings are
Python 2 `str`, which Python 3 reads back as bytes (hence b'data'). `py2_pickle` writes exactly that;
`pickle.dumps(protocol=2)` (a Python 3 re-save) is read too.
"""

import codecs
import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from convinit.data import load_dataset
from convinit.data.readers.cifar import CIFAR_MEAN, CIFAR_STD, load_batch
from convinit.errors import DataError


class Py2StylePickler(pickle._Pickler):
    """Writes bytes and str as Python 2's BINSTRING, as cPickle did for the original CIFAR files."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_bytes(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + len(obj).to_bytes(4, "little") + obj)
        self.memoize(obj)

    def save_str(self, obj: str) -> None:
        self.save_bytes(obj.encode("latin1"))

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


def py2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Py2StylePickler(buffer, protocol=2).dump(obj)
    # numpy 1.x (as in the originals) named its module numpy.core; numpy 2 still resolves that name
    return buffer.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def cifar_row(red: np.ndarray, green: np.ndarray, blue: np.ndarray) -> np.ndarray:
    """One row of b'data' as the CIFAR page defines it: 1024 red, then green, then blue, each row-major."""
    return np.concatenate([red.reshape(-1), green.reshape(-1), blue.reshape(-1)]).astype(np.uint8)


def pattern_image(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Planes that tell row from column and channel from channel: red = row, green = 100 + col."""
    rows, cols = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    return rows + index, 100 + cols + index, np.full((32, 32), 200 + index)


def write_cifar(root: Path, name: str, per_batch: int = 4, py2: bool = True, num_classes: int = 10) -> dict:
    """Fabricate a CIFAR folder; returns {file: (data, labels)}."""
    dumps = py2_pickle if py2 else (lambda obj: pickle.dumps(obj, protocol=2))
    rng = np.random.default_rng(0)
    if name == "cifar10":
        folder = root / "cifar-10-batches-py"
        files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        label_key, meta_name = b"labels", "batches.meta"
        meta = {b"label_names": [f"class{i}".encode() for i in range(num_classes)], b"num_vis": 3072}
    else:
        folder = root / "cifar-100-python"
        files = ["train", "test"]
        label_key, meta_name = b"fine_labels", "meta"
        meta = {
            b"fine_label_names": [f"fine{i}".encode() for i in range(num_classes)],
            b"coarse_label_names": [b"coarse0"],
        }
    folder.mkdir(parents=True)
    written = {}
    for k, file in enumerate(files):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        data[0] = cifar_row(*pattern_image(k))
        labels = rng.integers(0, num_classes, per_batch).tolist()  # a list of ints, as in the originals
        batch = {b"batch_label": f"batch {k}".encode(), b"data": data, label_key: labels,
                 b"filenames": [f"img_{k}_{i}.png".encode() for i in range(per_batch)]}  # fmt: skip
        if name == "cifar100":
            batch[b"coarse_labels"] = [0] * per_batch
        (folder / file).write_bytes(dumps(batch))
        written[file] = (data, labels)
    (folder / meta_name).write_bytes(dumps(meta))
    return written


def test_py2_style_pickle_has_bytes_keys_like_the_originals():
    blob = py2_pickle({b"data": np.zeros((1, 3072), np.uint8), b"labels": [1]})
    assert blob[:2] == b"\x80\x02"  # protocol 2
    assert b"numpy.core.multiarray\n_reconstruct" in blob
    assert set(pickle.loads(blob, encoding="bytes")) == {b"data", b"labels"}


@pytest.mark.parametrize("py2", [True, False], ids=["python2-pickle", "python3-protocol2-pickle"])
def test_cifar10_reader_reads_fabricated_batches_back(tmp_path, py2):
    written = write_cifar(tmp_path, "cifar10", py2=py2)
    ds = load_dataset("cifar10", tmp_path)
    train_files = [f"data_batch_{i}" for i in range(1, 6)]
    expected_train = np.concatenate([written[f][0] for f in train_files]).reshape(-1, 3, 32, 32)
    expected_labels = sum((written[f][1] for f in train_files), [])
    assert ds.train_images.shape == (20, 3, 32, 32) and ds.test_images.shape == (4, 3, 32, 32)
    assert torch.equal(ds.train_images, torch.from_numpy(expected_train))
    assert ds.train_labels.tolist() == expected_labels
    assert ds.test_labels.tolist() == written["test_batch"][1]
    assert ds.classes == [f"class{i}" for i in range(10)]
    assert ds.mean == CIFAR_MEAN and ds.std == CIFAR_STD
    assert ds.train_images.dtype == torch.uint8 and ds.train_labels.dtype == torch.int64


@pytest.mark.parametrize("py2", [True, False], ids=["python2-pickle", "python3-protocol2-pickle"])
def test_cifar100_reader_uses_fine_labels_and_fine_label_names(tmp_path, py2):
    written = write_cifar(tmp_path, "cifar100", py2=py2, num_classes=100)
    ds = load_dataset("cifar100", tmp_path / "cifar-100-python")  # the extracted folder itself works too
    assert ds.train_labels.tolist() == written["train"][1]
    assert ds.test_labels.tolist() == written["test"][1]
    assert ds.classes == [f"fine{i}" for i in range(100)]
    assert torch.equal(ds.test_images, torch.from_numpy(written["test"][0].reshape(-1, 3, 32, 32)))


def test_cifar_pixel_layout_row_is_red_then_green_then_blue_planes_row_major(tmp_path):
    write_cifar(tmp_path, "cifar10")
    ds = load_dataset("cifar10", tmp_path)
    image = ds.train_images[0].long()  # first image of data_batch_1: pattern_image(0)
    rows, cols = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
    assert torch.equal(image[0], rows)  # red plane: value = row index
    assert torch.equal(image[1], 100 + cols)  # green plane: value = 100 + column index
    assert torch.equal(image[2], torch.full((32, 32), 200))
    test_image = ds.test_images[0].long()  # first image of test_batch: pattern_image(5)
    assert torch.equal(test_image[0], rows + 5)


class RunsShell:
    """A pickle payload that would run a shell command when unpickled by a plain `pickle.load`."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_malicious_pickle_payload_is_live_under_plain_pickle(tmp_path):
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps({b"data": RunsShell(f"touch {marker}")}, protocol=2))
    assert marker.exists()  # so the refusal test below proves something


def test_malicious_cifar_pickle_is_refused_without_running_code(tmp_path):
    write_cifar(tmp_path, "cifar10")
    marker = tmp_path / "pwned"
    batch = {b"data": RunsShell(f"touch {marker}"), b"labels": [0]}
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DataError) as excinfo:
        load_dataset("cifar10", tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and "data_batch_1" in message
    assert not marker.exists()


class EncodesWith:
    """Pickles as `_codecs.encode(text, codec)`, the global Python 3 uses for bytes at protocol 2."""

    def __init__(self, text: str, codec: str):
        self.text, self.codec = text, codec

    def __reduce__(self):
        return codecs.encode, (self.text, self.codec)


def test_cifar_unpickler_admits_codecs_encode_only_for_latin1_text(tmp_path):
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps({b"k": EncodesWith("\xff\x00a", "latin1")}, protocol=2))
    assert load_batch(path) == {b"k": b"\xff\x00a"}
    path.write_bytes(pickle.dumps({b"k": EncodesWith("abc", "rot13")}, protocol=2))
    with pytest.raises(DataError):
        load_batch(path)


def test_cifar_batch_with_wrong_row_length_is_one_line_data_error(tmp_path):
    write_cifar(tmp_path, "cifar10")
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(py2_pickle({b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(DataError) as excinfo:
        load_dataset("cifar10", tmp_path)
    assert "\n" not in str(excinfo.value) and str(path) in str(excinfo.value)
