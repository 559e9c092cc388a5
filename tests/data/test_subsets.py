"""Stratified training subsets: fraction or per-class count, seeded draw or the first images."""

import math

import numpy as np
import pytest
import torch

from convinit.data import stratified_subset
from convinit.errors import ConfigError

# 3 classes of 10, 20 and 7 images, interleaved so that file order and class order differ
LABELS = torch.tensor([0, 1] * 10 + [1] * 10 + [2] * 7)
LABELS = LABELS[torch.randperm(37, generator=torch.Generator().manual_seed(1))]


def class_counts(indices: torch.Tensor) -> list[int]:
    return torch.bincount(LABELS[indices], minlength=3).tolist()


def test_no_fraction_and_no_per_class_keeps_everything():
    assert torch.equal(stratified_subset(LABELS), torch.arange(37))


@pytest.mark.parametrize("order", ["random", "first"])
def test_fraction_keeps_floor_of_fraction_of_each_class_and_at_least_one(order):
    for fraction in (0.1, 0.25, 0.5, 1.0):
        kept = stratified_subset(LABELS, fraction=fraction, order=order)
        assert class_counts(kept) == [max(1, math.floor(fraction * n)) for n in (10, 20, 7)]
        assert torch.equal(kept, kept.sort().values) and len(kept.unique()) == len(kept)


@pytest.mark.parametrize("order", ["random", "first"])
def test_per_class_keeps_exactly_n_of_each_class(order):
    kept = stratified_subset(LABELS, per_class=4, order=order)
    assert class_counts(kept) == [4, 4, 4]


def test_random_subset_is_deterministic_for_a_seed():
    a = stratified_subset(LABELS, fraction=0.5, seed=3)
    b = stratified_subset(LABELS, fraction=0.5, seed=3)
    assert torch.equal(a, b)


def test_random_subset_differs_for_another_seed():
    a = stratified_subset(LABELS, fraction=0.5, seed=3)
    b = stratified_subset(LABELS, fraction=0.5, seed=4)
    assert not torch.equal(a, b) and class_counts(a) == class_counts(b)


def test_first_order_keeps_the_first_images_of_each_class_in_file_order():
    kept = stratified_subset(LABELS, per_class=3, order="first", seed=123)
    expected = sorted(i for c in range(3) for i in (LABELS == c).nonzero().flatten()[:3].tolist())
    assert kept.tolist() == expected
    assert torch.equal(kept, stratified_subset(LABELS, per_class=3, order="first", seed=7))  # seed unused


def test_first_order_fraction_is_a_prefix_of_a_larger_fraction():
    small = set(stratified_subset(LABELS, fraction=0.2, order="first").tolist())
    large = set(stratified_subset(LABELS, fraction=0.6, order="first").tolist())
    assert small < large


def test_numpy_scalar_arguments_are_accepted():
    kept = stratified_subset(LABELS, per_class=np.int64(2))
    assert class_counts(kept) == [2, 2, 2]
    assert class_counts(stratified_subset(LABELS, fraction=np.float64(0.5))) == [5, 10, 3]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fraction": 0.0},
        {"fraction": -0.5},
        {"fraction": 1.5},
        {"fraction": "0.5"},
        {"fraction": True},
        {"per_class": 0},
        {"per_class": -1},
        {"per_class": 2.5},
        {"per_class": 8},  # class 2 has only 7 images
        {"per_class": True},
        {"fraction": 0.5, "per_class": 2},
        {"fraction": 0.5, "order": "last"},
    ],
    ids=repr,
)
def test_invalid_subset_arguments_are_one_line_config_errors(kwargs):
    with pytest.raises(ConfigError) as excinfo:
        stratified_subset(LABELS, **kwargs)
    assert "\n" not in str(excinfo.value)
