"""The embedded digits dataset: scikit-learn's 8x8 digits with a fixed, stratified 1000/797 split."""

import torch

from convinit.data import load_dataset


def test_digits_split_is_1000_train_797_test(digits):
    assert digits.train_images.shape == (1000, 1, 8, 8)
    assert digits.test_images.shape == (797, 1, 8, 8)
    assert digits.train_labels.shape == (1000,) and digits.test_labels.shape == (797,)
    assert digits.num_classes == 10 and digits.in_chans == 1 and digits.img_size == (8, 8)


def test_digits_split_is_stratified_with_every_class_in_both(digits):
    from sklearn.datasets import load_digits

    all_counts = torch.bincount(torch.as_tensor(load_digits().target), minlength=10).double()
    train_counts = torch.bincount(digits.train_labels, minlength=10).double()
    test_counts = torch.bincount(digits.test_labels, minlength=10).double()
    assert (train_counts > 0).all() and (test_counts > 0).all()
    assert torch.equal(train_counts + test_counts, all_counts)
    # stratified: each class keeps its share of the whole set within one image
    assert (train_counts - all_counts * 1000 / 1797).abs().max() <= 1


def test_digits_pixels_are_uint8_spanning_0_to_255(digits):
    for images in (digits.train_images, digits.test_images):
        assert images.dtype == torch.uint8
    assert int(digits.train_images.min()) == 0 and int(digits.train_images.max()) == 255
    assert digits.train_labels.dtype == torch.int64


def test_digits_pixels_are_sklearn_values_scaled_from_0_16(digits):
    from sklearn.datasets import load_digits

    original = torch.as_tensor(load_digits().images)  # (1797, 8, 8), values 0..16
    expected = torch.round(original * 255 / 16).to(torch.uint8)
    together = torch.cat([digits.train_images, digits.test_images])[:, 0]
    # the split is a permutation of the full set: compare sorted flattened images as sets of rows
    assert sorted(map(bytes, together.reshape(1797, -1).numpy())) == sorted(
        map(bytes, expected.reshape(1797, -1).numpy())
    )


def test_digits_is_deterministic_across_calls(digits):
    again = load_dataset("digits")
    assert torch.equal(again.train_images, digits.train_images)
    assert torch.equal(again.train_labels, digits.train_labels)
    assert torch.equal(again.test_images, digits.test_images)
    assert torch.equal(again.test_labels, digits.test_labels)


def test_digits_are_read_once_per_process_and_each_load_gets_its_own_tensors(digits, monkeypatch):
    """The demo opens digits 21 times: the file is parsed once, and a caller that writes into its images
    changes no other caller's copy."""
    import convinit.data.readers.digits as reader

    def refuse(path):
        raise AssertionError("digits were parsed again")

    monkeypatch.setattr(reader, "read_table", refuse)
    first, second = load_dataset("digits"), load_dataset("digits")
    first.train_images[0] = 7
    assert torch.equal(second.train_images, digits.train_images)
    assert not torch.equal(first.train_images, digits.train_images)


def test_the_stored_split_is_scikit_learns_stratified_split_row_for_row(digits):
    """The split every digits result was made on: scikit-learn's train_test_split(train_size=1000,
    stratify=labels, random_state=0), images and labels as load_digits gives them, in the file's order."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = torch.round(torch.as_tensor(bunch.images) * 255 / 16).to(torch.uint8)[:, None]
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    train, test = train_test_split(np.arange(1797), train_size=1000, stratify=bunch.target, random_state=0)
    train, test = torch.as_tensor(np.sort(train)), torch.as_tensor(np.sort(test))
    assert torch.equal(digits.train_images, images[train]) and torch.equal(digits.train_labels, labels[train])
    assert torch.equal(digits.test_images, images[test]) and torch.equal(digits.test_labels, labels[test])


def test_reading_digits_imports_no_scikit_learn():
    """scikit-learn's import takes a second and a half; its file is all digits needs."""
    import subprocess
    import sys

    code = (
        "import sys; from convinit.data import load_dataset; load_dataset('digits'); "
        "print('sklearn' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_digits_file_of_another_shape_is_refused_in_one_line(tmp_path):
    import gzip

    import pytest

    import convinit.data.readers.digits as reader
    from convinit.errors import DataError

    path = tmp_path / "digits.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("0," * 64 + "3\n")
    with pytest.raises(DataError, match=r"holds a 1x65 table, not the 1797 rows") as caught:
        reader.read_table(path)
    assert "\n" not in str(caught.value)
