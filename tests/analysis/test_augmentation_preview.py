"""augmentations.png: the augmented training samples, each captioned with its class name."""

from __future__ import annotations

import numpy as np
import torch

from convinit.analysis.augmentation_preview import CAPTION, COLUMNS, PAD, augmentation_grid, augmented_samples
from convinit.config import resolve_config
from convinit.data.source import build_data


def test_the_preview_samples_carry_their_own_labels(tiny_overrides):
    data = build_data(resolve_config(None, tiny_overrides), torch.device("cpu"))
    _, labels = augmented_samples(data, seed=0)
    picks = torch.linspace(0, data.train_size - 1, len(labels)).long()
    assert torch.equal(labels, data.train.labels[picks].cpu())


def test_each_tile_of_the_grid_has_its_class_name_under_it(tiny_overrides):
    data = build_data(resolve_config(None, tiny_overrides), torch.device("cpu"))
    data.classes = [f"class {name}" for name in data.classes]  # names unlike digits' own
    _, labels = augmented_samples(data, seed=0)
    grid = augmentation_grid(data, seed=0)
    tile = 64  # digits: 8 px enlarged 8 times
    captions = [
        grid[PAD + row * (tile + CAPTION + PAD) + tile : PAD + row * (tile + CAPTION + PAD) + tile + CAPTION,
             PAD + col * (tile + PAD) : PAD + col * (tile + PAD) + tile]
        for row, col in (divmod(i, COLUMNS) for i in range(len(labels)))
    ]  # fmt: skip
    assert all((caption < 128).any() for caption in captions)  # dark text on every caption band
    same = [i for i in range(1, len(labels)) if labels[i] == labels[0]]
    other = [i for i in range(1, len(labels)) if labels[i] != labels[0]]
    assert np.array_equal(captions[0], captions[same[0]]) and not np.array_equal(
        captions[0], captions[other[0]]
    )
