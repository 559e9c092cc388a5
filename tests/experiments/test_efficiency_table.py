"""efficiency.md gives each cell's spread over seeds, as the README says, not the mean alone."""

from __future__ import annotations

from pathlib import Path

from convinit.experiments.efficiency import efficiency_summary
from convinit.experiments.report import RunRecord


def record(method: str, images: int, seed: int, accuracy: float) -> RunRecord:
    metrics = [{"epoch": 1, "test_acc": accuracy}]
    experiment = {"group": method, "train_images": images, "fraction": images / 200}
    return RunRecord(Path(f"{method}-{images}-{seed}"), method, seed, metrics, {}, experiment)


def test_each_cell_is_the_mean_and_std_over_seeds(monkeypatch):
    records = [
        record("random", 100, 0, 50.0), record("random", 100, 1, 54.0),
        record("random", 200, 0, 60.0), record("random", 200, 1, 62.0),
        record("impulse", 100, 0, 70.0), record("impulse", 100, 1, 72.0),
        record("impulse", 200, 0, 80.0),  # one seed left: its mean alone
    ]  # fmt: skip
    monkeypatch.setattr("convinit.experiments.efficiency.find_runs", lambda root: records)
    table = efficiency_summary(Path("runs"))
    assert "| random | 52.0 +- 2.8 | 61.0 +- 1.4 | +0.00 |" in table
    assert "| impulse | 71.0 +- 1.4 | 80.0 | +19.00 |" in table
    assert "mean +- std over the 1-2 seed(s) of each cell" in table
