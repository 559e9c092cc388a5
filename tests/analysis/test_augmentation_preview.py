"""augmentations.png: the augmented training samples, each captioned with its class name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from convinit.analysis.augmentation_preview import CAPTION, COLUMNS, PAD, augmentation_grid, augmented_samples
from convinit.config import resolve_config
from convinit.data.source import build_data
from convinit.train.plan import data_recipe


def test_the_preview_samples_carry_their_own_labels(tiny_overrides):
    data = build_data(data_recipe(resolve_config(None, tiny_overrides)), torch.device("cpu"))
    _, labels = augmented_samples(data, seed=0)
    picks = torch.linspace(0, data.train_size - 1, len(labels)).long()
    assert torch.equal(labels, data.train.labels[picks].cpu())


def test_each_tile_of_the_grid_has_its_class_name_under_it(tiny_overrides):
    data = build_data(data_recipe(resolve_config(None, tiny_overrides)), torch.device("cpu"))
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


@pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="faking CUDA needs a torch built with CUDA")
def test_the_preview_draws_on_the_device_from_its_own_seeded_generator_and_restores_the_runs(monkeypatch):
    """On a (pretend) GPU: the device generator's state is saved, seeded from the preview's seed before
    any draw and put back afterwards, so the run's CUDA random stream is as if no preview were drawn."""
    from convinit.speed.fake_cuda import fake_cuda
    from tests.gpu_path.test_training_step import TINY_VIT, device_data, digits_config, read_dataset

    log = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": log.append("save") or "state")
    monkeypatch.setattr(
        torch.cuda, "set_rng_state", lambda state, device="cuda": log.append(f"restore {state}")
    )
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: log.append(f"seed {seed}"))
    monkeypatch.setattr(torch.cuda, "device", lambda device: __import__("contextlib").nullcontext())
    cfg = digits_config("paper1/recipe", [*TINY_VIT, "hflip=true", "crop_padding=2"])
    dataset = read_dataset(cfg)
    with fake_cuda():
        data = device_data(cfg, dataset)
        augment = data.augment.forward
        data.augment.forward = lambda images: log.append("draw") or augment(images)
        augmented_samples(data, seed=7)
    assert log == ["save", "seed 7", "draw", "restore state"]
