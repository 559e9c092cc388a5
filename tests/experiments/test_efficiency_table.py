"""efficiency.md gives each cell's spread over seeds, as the README says, not the mean alone."""

from __future__ import annotations

from pathlib import Path

from convinit.experiments.efficiency import efficiency_summary
from convinit.experiments.report import CellResult


def record(method: str, images: int, seed: int, accuracy: float) -> CellResult:
    metrics = [{"epoch": 1, "test_acc": accuracy}]
    experiment = {"group": method, "train_images": images, "fraction": images / 200}
    return CellResult(Path(f"{method}-{images}-{seed}"), method, seed, metrics, {}, experiment)


def summary_of(records: list[CellResult], monkeypatch) -> str:
    """The efficiency table of `records` (the grid's runs, stood in for; later calls read them again)."""
    monkeypatch.setattr("convinit.experiments.efficiency.find_runs", lambda root: records)
    return efficiency_summary(Path("runs"))


def test_each_cell_is_the_mean_and_std_over_seeds(monkeypatch):
    records = [
        record("random", 100, 0, 50.0), record("random", 100, 1, 54.0),
        record("random", 200, 0, 60.0), record("random", 200, 1, 62.0),
        record("impulse", 100, 0, 70.0), record("impulse", 100, 1, 72.0),
        record("impulse", 200, 0, 80.0),  # one seed left: its mean alone
    ]  # fmt: skip
    table = summary_of(records, monkeypatch)
    assert "| random | 52.0 +- 2.8 | 61.0 +- 1.4 | +0.00 |" in table
    assert "| impulse | 71.0 +- 1.4 | 80.0 | +19.00 |" in table
    assert "mean +- std over the 1-2 seed(s) of each cell" in table


def scheduled(
    method: str, images: int, epochs: int, steps: int, accuracy: float, run_dir: Path
) -> CellResult:
    metrics = [{"epoch": epochs, "step": steps, "test_acc": accuracy}]
    experiment = {"group": method, "train_images": images, "fraction": images / 120}
    return CellResult(run_dir, method, 0, metrics, {}, experiment)


def test_columns_of_different_epochs_are_named_with_their_steps(monkeypatch, tmp_path):
    """The issue's grid: the 25 % runs 80 epochs of one step, the full ones 20 epochs of one (dropped
    partial batch): the table says the columns differ, and in what."""
    records = [
        scheduled("random", 30, 80, 80, 81.7, tmp_path),
        scheduled("random", 120, 20, 20, 76.7, tmp_path),
    ]
    table = summary_of(records, monkeypatch)
    assert "Schedules per column: 30 imgs: 80 epochs, 80 steps; 120 imgs: 20 epochs, 20 steps." in table
    assert "The columns ran different numbers of epochs." in table
    records[0].metrics[0].update(epoch=40, step=40)
    records[1].metrics[0].update(step=40)  # the partial batch kept: two steps an epoch
    assert "chosen so that every run takes as many optimisation steps" in efficiency_summary(Path("runs"))
    records[0].metrics[0].update(epoch=20, step=20)  # unscaled: the same epochs, the larger set more steps
    assert "a larger set took more optimisation steps" in efficiency_summary(Path("runs"))


def test_a_test_set_too_small_to_separate_the_cells_is_said_in_the_table(monkeypatch, tmp_path):
    (tmp_path / "preprocessing.json").write_text('{"test_images": 30}')
    records = [
        scheduled("random", 30, 40, 40, 80.0, tmp_path),
        scheduled("impulse", 30, 40, 40, 80.0, tmp_path),
    ]
    table = summary_of(records, monkeypatch)
    assert "The test set has 30 images: one image is 3.3 points" in table
    assert "two binomial standard errors are 14.6 points" in table  # 200 * sqrt(0.8 * 0.2 / 30)
