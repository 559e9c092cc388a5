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
    """The demo opens digits 21 times: scikit-learn parses its file once, and a caller that writes into
    its images changes no other caller's copy."""
    import sklearn.datasets

    def refuse():
        raise AssertionError("digits were parsed again")

    monkeypatch.setattr(sklearn.datasets, "load_digits", refuse)
    first, second = load_dataset("digits"), load_dataset("digits")
    first.train_images[0] = 7
    assert torch.equal(second.train_images, digits.train_images)
    assert not torch.equal(first.train_images, digits.train_images)
