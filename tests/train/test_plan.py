"""A run is planned once: `validate` resolves the device, the data's shape and the model's arguments,
and `build_run` follows that plan; the device is looked up once and the model built once per `train()`."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import torch

from convinit.config import resolve_config
from convinit.data import load_dataset
from convinit.models import external
from convinit.speed.stream import fabricate_folder
from convinit.train import process as device_module
from convinit.train import train, trainer
from convinit.train.plan import DataShape, known_shape


def patch_everywhere(monkeypatch, original, replacement) -> None:
    """Replace `original` in every convinit module that imported it, so no call path escapes the count."""
    for name, module in list(sys.modules.items()):
        if name.startswith("convinit") and getattr(module, original.__name__, None) is original:
            monkeypatch.setattr(module, original.__name__, replacement)


@pytest.fixture
def counted(monkeypatch):
    """Counts of device look-ups and model constructions (by the device constructed on), and what
    `train` validated and what it built from."""
    counts: Counter[str] = Counter()
    seen: dict[str, object] = {}
    resolve, construct = device_module.resolve_device, external.build_model_by_name

    def counted_resolve(name):
        counts["device"] += 1
        return resolve(name)

    def counted_construct(name, **kwargs):
        counts[torch.empty(()).device.type] += 1  # "meta" inside validation's meta construction
        seen["built_with"] = kwargs
        return construct(name, **kwargs)

    validate, build_run = trainer.validate, trainer.build_run

    def recorded_validate(cfg):
        seen["validated"] = validate(cfg)
        return seen["validated"]

    def recorded_build_run(plan, *args):
        seen["taken"] = plan
        return build_run(plan, *args)

    patch_everywhere(monkeypatch, resolve, counted_resolve)
    patch_everywhere(monkeypatch, construct, counted_construct)
    monkeypatch.setattr(trainer, "validate", recorded_validate)
    monkeypatch.setattr(trainer, "build_run", recorded_build_run)
    return counts, seen


def test_train_resolves_the_device_once_and_builds_the_model_once_from_validations_plan(
    tmp_path, tiny_overrides, counted
):
    counts, seen = counted
    train(resolve_config(None, tiny_overrides + ["epochs=1"]), tmp_path / "run", progress=False)
    assert counts == {"device": 1, "meta": 1, "cpu": 1}  # the meta construction allocates and draws nothing
    assert seen["taken"] is seen["validated"]
    plan = seen["taken"]
    assert seen["built_with"] == {**plan.cfg.model_args, "num_classes": 10, "img_size": (8, 8), "in_chans": 1}
    assert plan.model.shape == DataShape(10, 1, (8, 8)) and plan.device == torch.device("cpu")


def test_a_resumed_run_is_planned_once_from_its_saved_config(tmp_path, tiny_overrides, counted):
    counts, seen = counted
    train(resolve_config(None, tiny_overrides + ["epochs=1"]), tmp_path / "run", progress=False)
    counts.clear()
    train(None, tmp_path / "run", resume=True, progress=False)
    assert counts == {"device": 1, "meta": 1, "cpu": 1}
    assert seen["taken"] is seen["validated"] and seen["taken"].cfg.epochs == 1


def test_a_folder_is_planned_without_a_shape_and_its_model_built_once_from_the_data_read(
    tmp_path, tiny_overrides, counted
):
    counts, seen = counted
    folder = fabricate_folder(tmp_path / "images", classes=3, per_class=4, val_per_class=2)
    overrides = [f"data_dir={folder}", "dataset=folder", "data_mode=device", "img_size=8", "batch_size=4"]
    train(resolve_config(None, tiny_overrides + ["epochs=1", *overrides]), tmp_path / "run", progress=False)
    assert seen["taken"] is seen["validated"] and seen["taken"].model is None  # unknown until read
    assert counts == {"device": 1, "meta": 1, "cpu": 1}  # checked on the meta device once read, then built
    assert (seen["built_with"]["num_classes"], seen["built_with"]["img_size"]) == (3, 8)


def test_the_planned_shape_of_digits_is_the_shape_its_reader_gives():
    dataset = load_dataset("digits")
    planned = known_shape(resolve_config(None, ["dataset=digits"]))
    assert planned == DataShape(dataset.num_classes, dataset.in_chans, dataset.img_size)
