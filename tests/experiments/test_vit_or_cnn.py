"""`convinit vit-or-cnn`: the recommended ViT against the CNN of its size on one's data, with a verdict that
counts seed noise and the test set's size; it adapts to any folder, however small, and a rerun continues."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from convinit.cli import main
from convinit.errors import ConfigError
from convinit.experiments.report import CellResult
from convinit.experiments.vit_or_cnn import (
    CNN,
    VIT,
    binomial_half,
    grid_patch,
    judge,
    kept_comparison,
    plan_comparison,
    still_learning,
)


def write_folder(root: Path, classes: int = 2, per_class: int = 20, side: int = 16) -> Path:
    """A class-per-folder set of small RGB images, each class its own colour with a per-image shade."""
    for label in range(classes):
        for i in range(per_class):
            (root / f"class{label}").mkdir(parents=True, exist_ok=True)
            colour = (120 * label % 256, 5 * i, 255 - 100 * label % 256)
            Image.new("RGB", (side, side), colour).save(root / f"class{label}" / f"{i:02d}.png")
    return root


def record(label: str, seed: int, accuracy: float, fit: float = 100.0, losses=(1.0,) * 10) -> CellResult:
    metrics = [{"epoch": e + 1, "train_loss": loss} for e, loss in enumerate(losses)]
    metrics[-1].update(test_acc=accuracy, fit_acc=fit)
    return CellResult(Path(f"{label}/seed{seed}"), label, seed, metrics, {})


def rows(vit: list[float], cnn: list[float]) -> list[CellResult]:
    return [record(VIT, s, a) for s, a in enumerate(vit)] + [record(CNN, s, a) for s, a in enumerate(cnn)]


def test_the_patch_gives_the_token_grid_nearest_the_results_pages_7x7():
    assert grid_patch(28, 28) == 4  # Fashion-MNIST: the grid vit-vs-cnn ran
    assert grid_patch(8, 8) == 1  # digits: 8x8, not a 4x4 grid
    assert grid_patch(32, 32) == 4 and grid_patch(224, 224) == 32
    assert grid_patch(12, 16) == 2  # a divisor of both sides, the grid at least 5 tokens


def test_a_tiny_folder_is_planned_without_refusal_with_all_its_images_and_more_epochs(tmp_path):
    folder = write_folder(tmp_path / "photos")
    plan = plan_comparison(["dataset=folder", f"data_dir={folder}"])
    assert plan.train_images == 32 and plan.shared["per_class"] is None  # not the preset's 100 per class
    assert plan.shared["hflip"] is False and any("flips off" in note for note in plan.notes)
    assert plan.shared["crop_padding"] == 2  # a seventh of 16 px
    assert plan.epochs > 100 and len(plan.seeds) == 5  # one step an epoch: many epochs, cheap seeds
    assert (
        plan.methods[VIT][1]["model_args"]["patch_size"] == plan.methods[CNN][1]["model_args"]["patch_size"]
    )


def test_the_users_augmentation_stays_and_digits_get_no_flips(tmp_path):
    folder = write_folder(tmp_path / "photos")
    plan = plan_comparison(
        ["dataset=folder", f"data_dir={folder}", "hflip=true", "crop_padding=1"], quick=True
    )
    assert plan.shared["hflip"] is True and plan.shared["crop_padding"] == 1 and len(plan.seeds) == 3
    digits = plan_comparison([], seeds=[0], epochs=2)  # no dataset: the embedded digits, no flips
    assert digits.shared["dataset"] == "digits" and digits.shared["hflip"] is False
    assert digits.epochs == 2 and digits.epochs_fixed and digits.seeds == (0,)


def test_a_model_that_is_not_a_vit_of_the_users_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="model=timm:NAME or model=hf:vit"):
        plan_comparison(["model=convmixer"])


def test_two_seeds_that_agree_cannot_decide_on_120_test_images():
    """The issue's case: +4.17 on both seeds, a zero-width seed interval; 120 test images cannot tell."""
    verdict = judge(rows([70.0, 71.0], [65.83, 66.83]), 120)
    assert verdict.seed_half == pytest.approx(0.0, abs=1e-9)
    assert verdict.answer == "cannot tell" and verdict.interval[0] < 0 < verdict.interval[1]
    assert verdict.test_half == pytest.approx(binomial_half(70.5, 66.33, 120))


def test_a_clear_gap_on_a_large_test_set_names_the_better_model_and_a_small_one_is_about_as_good():
    clear = judge(rows([80.1, 80.3, 79.9, 80.2, 80.0], [82.4, 82.6, 82.5, 82.3, 82.7]), 10_000)
    assert clear.answer == "the CNN" and clear.interval[1] < 0
    level = judge(rows([82.4, 82.6, 82.5, 82.3, 82.7], [82.5, 82.5, 82.4, 82.4, 82.6]), 10_000)
    assert level.answer == "about as good"
    assert judge(rows([90.0], [80.0]), 10_000).answer == "cannot tell"  # one seed: no seed noise measured


def test_a_row_that_neither_fitted_nor_plateaued_is_still_learning():
    falling = tuple(1.0 - 0.05 * e for e in range(10))
    records = [
        record(VIT, 0, 70.0, fit=80.0, losses=falling),
        record(CNN, 0, 75.0, fit=100.0, losses=falling),
    ]
    assert still_learning(records) == [VIT]  # the CNN fitted its training images
    records[0] = record(VIT, 0, 70.0, fit=80.0)  # flat loss: plateaued below a fit
    assert still_learning(records) == []


def test_the_command_answers_on_a_folder_and_a_rerun_continues(tmp_path, capsys):
    folder = write_folder(tmp_path / "photos", per_class=10, side=8)
    args = ["vit-or-cnn", "dataset=folder", f"data_dir={folder}", "--epochs", "1", "--seeds", "1"]
    args += ["--out", str(tmp_path / "cmp"), "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "Verdict: cannot tell on 4 test images and one seed" in printed.out
    assert "flips off" in printed.err and (tmp_path / "cmp" / "verdict.md").is_file()
    assert main(args) == 0  # finished runs are skipped, the same verdict is given
    assert "Verdict: cannot tell on 4 test images" in capsys.readouterr().out


def test_vit_or_cnn_is_in_the_public_api():
    import convinit

    assert "vit_or_cnn" in convinit.__all__ and callable(convinit.vit_or_cnn)


def test_the_results_pages_three_sizes_are_printed_from_the_kept_runs_nearest_size_first():
    sizes = ("at 100 training images", "at 300 training images", "at 1,000 training images")
    small, large = kept_comparison(120)[0], kept_comparison(5000)[0]
    assert [small.index(size) for size in sizes] == sorted(small.index(size) for size in sizes)
    assert [large.index(size) for size in reversed(sizes)] == sorted(large.index(size) for size in sizes)
    assert "1,500 at 100 images" in small and "(5 seeds)" in small  # the 100-image runs' own schedule
