"""Horizontal flips respect the data: a run that mirrors digits or house numbers is told, in one line, that
a mirror can change their class; clothes and objects (and data of unknown nature) are mirrored silently."""

from __future__ import annotations

import pytest

from convinit.config import resolve_config
from convinit.config import train_config as config_module
from convinit.data import dataset_info
from convinit.train import validate

MODEL = ["model=simplevit", "model_args.dim=16", "model_args.depth=1", "model_args.heads=2", "device=cpu"]


@pytest.fixture
def mirror_notes(monkeypatch, capsys):
    """The lines validation printed about mirrors, from a fresh note list."""
    monkeypatch.setattr(config_module, "_SAID", set())
    monkeypatch.setattr(config_module, "_PENDING", [])
    return lambda: [line for line in capsys.readouterr().err.splitlines() if "mirror" in line]


def test_hflip_on_digits_says_in_one_line_that_a_mirror_can_change_the_class(mirror_notes):
    validate(resolve_config(None, ["dataset=digits", "hflip=true", *MODEL]))
    said = mirror_notes()
    assert len(said) == 1
    assert "digits" in said[0] and "hflip=false" in said[0]


def test_digits_without_hflip_say_nothing_about_mirrors(mirror_notes):
    validate(resolve_config(None, ["dataset=digits", "crop_padding=1", *MODEL]))
    assert mirror_notes() == []


@pytest.mark.parametrize(
    ("dataset", "keeps"),
    [
        ("digits", False),
        ("mnist", False),
        ("svhn", False),
        ("fashion-mnist", True),
        ("cifar10", True),
        ("cifar100", True),
        ("tiny-imagenet", True),
        ("folder", None),
    ],
)
def test_each_dataset_says_whether_a_mirror_keeps_its_class(dataset, keeps):
    assert dataset_info(dataset).mirror_keeps_class is keeps
