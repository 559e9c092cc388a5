"""A validation split for choosing a recipe without the test set (`holdout_per_class`): held out of the
training images the subset left out, so a validation run trains on exactly the images of its test twin,
and the run then evaluates on it and never reads the test set."""

from __future__ import annotations

import pytest
import torch

from convinit.config import resolve_config
from convinit.data import holdout_split, stratified_subset
from convinit.errors import ConfigError
from convinit.train import evaluate_run, train

LABELS = torch.arange(10).repeat_interleave(30)  # 10 classes of 30 images


def test_the_held_out_images_come_from_outside_the_subset_and_leave_its_training_set_as_it_was():
    keep = stratified_subset(LABELS, per_class=10, seed=3)
    trained, held = holdout_split(LABELS, keep, per_class=5, seed=3)
    assert torch.equal(trained, keep)
    assert not set(held.tolist()) & set(keep.tolist())
    assert torch.equal(LABELS[held].bincount(), torch.full((10,), 5))


def test_without_a_subset_the_held_out_images_leave_the_training_set():
    keep = stratified_subset(LABELS)
    trained, held = holdout_split(LABELS, keep, per_class=4, seed=0)
    assert len(trained) == 300 - 40 and not set(held.tolist()) & set(trained.tolist())
    assert sorted([*trained.tolist(), *held.tolist()]) == list(range(300))


def test_the_split_is_a_function_of_the_seed():
    keep = stratified_subset(LABELS, per_class=10, seed=1)
    assert torch.equal(holdout_split(LABELS, keep, 5, seed=1)[1], holdout_split(LABELS, keep, 5, seed=1)[1])
    assert not torch.equal(
        holdout_split(LABELS, keep, 5, seed=1)[1], holdout_split(LABELS, keep, 5, seed=2)[1]
    )


@pytest.mark.parametrize("count", [0, -1, 2.5, True])
def test_a_holdout_that_is_not_a_positive_integer_is_refused_in_one_line(count):
    with pytest.raises(ConfigError, match="^holdout_per_class must be a positive integer"):
        holdout_split(LABELS, stratified_subset(LABELS), count)


def test_a_holdout_that_would_leave_a_class_nothing_to_train_on_is_refused():
    with pytest.raises(ConfigError, match="class 0 has only 30 training images.*lower holdout_per_class"):
        holdout_split(LABELS, stratified_subset(LABELS), 30)


def test_a_run_with_a_holdout_evaluates_on_it_never_on_the_test_set_and_reports_its_fit(
    tmp_path, monkeypatch, tiny_overrides, capsys
):
    from convinit.data import datasets

    real = datasets.load_dataset

    def without_test_images(*args, **kwargs):
        dataset = real(*args, **kwargs)
        dataset.test_images, dataset.test_labels = (
            dataset.test_images[:0],
            dataset.test_labels[:0],
        )  # read: 0/0
        return dataset

    monkeypatch.setattr("convinit.data.source.load_dataset", without_test_images)
    cfg = resolve_config(None, [*tiny_overrides, "per_class=20", "holdout_per_class=30", "epochs=1"])
    run = train(cfg, tmp_path / "run")
    final = run.metrics[-1]
    assert run.held_out and 0 <= final["test_acc"] <= 100 and final["test_loss"] == final["test_loss"]
    assert 0 <= final["fit_acc"] <= 100  # the 200 training images, unaugmented
    assert (
        "200 training / 300 validation images (held out of the training images; the test set is not read)"
        in (capsys.readouterr().err)
    )
    assert evaluate_run(tmp_path / "run", device="cpu")["split"] == "validation"
