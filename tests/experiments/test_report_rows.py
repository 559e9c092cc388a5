"""Report rows: one configuration per row, paired differences with an interval, bias and provenance."""

from __future__ import annotations

import json

import pytest

from convinit.config import resolve_config, save_config
from convinit.errors import ConfigError
from convinit.experiments.paired import gap_share, paired_difference
from convinit.experiments.report import find_runs, summarise, write_report


def fake_run(run_dir, overrides, accuracy, bias=None, provenance=True):
    """A finished run directory as `convinit train` leaves it (config, metrics, finished, provenance)."""
    run_dir.mkdir(parents=True)
    save_config(resolve_config(None, overrides), run_dir / "config.yaml")
    first = {"epoch": 0, "step": 0, "test_acc": 10.0}
    last = {"epoch": 2, "step": 20, "test_acc": accuracy, "seconds": 1.0, "images_per_s": 100.0}
    if bias:
        first["init_quality/target_mass"], last["init_quality/target_mass"] = bias
    rows = [first, {"epoch": 1, "step": 10}, last]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "finished.json").write_text(json.dumps(last))
    if provenance:
        about = {"convinit_version": "0.1.0", "git_commit": "0123456789abcdef"}
        (run_dir / "provenance.json").write_text(json.dumps(about))


def test_paired_difference_interval_is_the_t_interval_of_the_per_seed_differences():
    got = paired_difference({0: 71.0, 1: 73.0, 2: 75.0, 3: 60.0}, {0: 70.0, 1: 71.0, 2: 72.0})
    assert got.seeds == (0, 1, 2) and got.differences == (1.0, 2.0, 3.0)
    low, high = got.interval  # mean 2, sd 1, t(0.975, 2) = 4.3027
    assert low == pytest.approx(2 - 4.3027 / 3**0.5, abs=1e-3) and high == pytest.approx(2 + 2.4842, abs=1e-3)
    assert got.within_noise and got.describe().endswith("within noise")
    clear = paired_difference({0: 75.0, 1: 76.0, 2: 75.5}, {0: 70.0, 1: 70.5, 2: 70.2})
    assert not clear.within_noise and "within noise" not in clear.describe()
    assert "no interval" in paired_difference({0: 1.0}, {0: 0.0}).describe()
    assert paired_difference({1: 1.0}, {0: 0.0}) is None


def test_a_gap_share_is_the_mean_gain_over_the_mean_gap_with_the_paired_interval_in_gap_units():
    row, reference, ceiling = {0: 72.0, 1: 73.0, 2: 74.0}, {0: 70.0, 1: 70.0, 2: 70.0}, {0: 78, 1: 78, 2: 78}
    share = gap_share(row, reference, ceiling)
    assert share.mean == pytest.approx(3 / 8)  # gains 2, 3, 4 over gaps of 8
    low, high = paired_difference(row, reference).interval
    assert share.interval == pytest.approx((low / 8, high / 8))  # says what the difference says about 0
    assert share.describe() == f"0.38 [{low / 8:.2f}, {high / 8:.2f}]"
    no_gap = gap_share(row, reference, {0: 69.0, 1: 70.0, 2: 70.0})
    assert no_gap.mean is None and no_gap.interval is None and no_gap.describe().startswith("no gap")
    assert gap_share(row, reference, {5: 80.0}) is None


def test_unrelated_runs_in_one_folder_are_separate_rows_named_by_what_differs(tmp_path):
    fake_run(tmp_path / "a", ["init=random"], 30.0)
    fake_run(tmp_path / "b", ["init=impulse"], 40.0)
    fake_run(tmp_path / "c", ["init=impulse", "lr=3e-3"], 35.0, provenance=False)
    rows = summarise(find_runs(tmp_path))
    assert [r["seeds"] for r in rows] == [1, 1, 1]
    assert [r["final_test_acc_mean"] for r in rows] == [30.0, 40.0, 35.0]
    assert rows[0]["method"] == "[init=random, lr=0.001]" and rows[2]["method"] == "[init=impulse, lr=0.003]"
    report = write_report(tmp_path).read_text()
    assert "convinit 0.1.0 @ 0123456789ab" in report
    assert "convinit version and commit not recorded" in report and "convinit ? @ ?" not in report


def test_seeds_of_one_setting_share_a_row_and_are_paired_with_the_first_row(tmp_path):
    for seed, (base, better) in enumerate([(70.0, 73.0), (72.0, 74.0), (71.0, 73.5)]):
        fake_run(tmp_path / "random" / f"seed{seed}", [f"seed={seed}", "init=random"], base, (None, None))
        fake_run(tmp_path / "impulse" / f"seed{seed}", [f"seed={seed}", "init=impulse"], better, (0.8, 0.5))
    rows = summarise(find_runs(tmp_path))
    assert [(r["method"], r["seeds"]) for r in rows] == [("impulse", 3), ("random", 3)]
    assert (
        rows[1]["vs_first_row"].startswith("-2.50 [-3.74, -1.26]")
        and rows[1]["vs_first_row_within_noise"] is False
    )
    assert rows[0]["target_mass_step0"] == pytest.approx(0.8) and rows[0]["target_mass_end"] == pytest.approx(
        0.5
    )
    report = write_report(tmp_path).read_text()
    assert "| impulse | 3 | 73.50 +- 0.50 | reference | 0.80 / 0.50 | - | - |" in report
    assert (tmp_path / "bias.png").stat().st_size > 0


def test_reference_row_comes_first_and_an_unknown_one_is_refused_naming_the_rows(tmp_path):
    for seed in (0, 1):
        fake_run(tmp_path / "impulse" / f"seed{seed}", [f"seed={seed}", "init=impulse"], 73.0 + seed)
        fake_run(tmp_path / "random" / f"seed{seed}", [f"seed={seed}", "init=random"], 70.0 + 2 * seed)
    rows = summarise(find_runs(tmp_path), reference="random")
    assert [r["method"] for r in rows] == ["random", "impulse"] and rows[1]["vs_first_row"].startswith(
        "+2.50"
    )
    with pytest.raises(
        ConfigError, match="'mimetic' is not a row of this report; its rows: 'impulse', 'random'"
    ):
        write_report(tmp_path, reference="mimetic")


def test_a_report_on_a_small_test_set_says_what_differences_it_cannot_separate(tmp_path):
    """30 test images at 80 %: one image is 3.3 points, two binomial standard errors 14.6."""
    for name, accuracy in (("random", 80.0), ("impulse", 86.7)):
        fake_run(tmp_path / name, [f"init={name}"], accuracy)
        (tmp_path / name / "preprocessing.json").write_text(json.dumps({"test_images": 30}))
    report = write_report(tmp_path).read_text()
    assert "The test set has 30 images: one image is 3.3 points;" in report
    assert "(80.0-86.7 %) two binomial standard errors are 12.4-14.6 points" in report


def test_resolution_is_two_binomial_standard_errors_and_unsaid_below_a_point():
    from convinit.experiments.report import resolution_note

    digits = resolution_note(797, [97.4])  # 200 sqrt(0.974 x 0.026 / 797) = 1.13
    assert "two binomial standard errors are 1.1 points" in digits
    assert resolution_note(10_000, [85.0]) is None  # 0.71 points: the test set separates a point
    assert resolution_note(None, [85.0]) is None and resolution_note(30, []) is None
