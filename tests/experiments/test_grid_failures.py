"""A grid's failed run says why on the terminal, and a preset's subset size the data cannot hold is settled
before any run: dropped with one line when the preset set it, refused in one line when the user did."""

from __future__ import annotations

import json
import warnings

import pytest

from convinit.config import drop_notes, say_notes
from convinit.errors import ConfigError
from convinit.experiments.efficiency import efficiency_runs
from convinit.experiments.report import find_failed, find_runs
from tests.experiments.test_vit_or_cnn import write_folder

CNN = {"cnn": ("own_models/convmixer_small", {})}  # the preset's per_class is 100


def test_a_presets_per_class_the_folder_cannot_hold_is_dropped_with_one_line(tmp_path, capsys):
    folder = write_folder(tmp_path / "photos", per_class=10, side=8)
    drop_notes()
    runs = efficiency_runs(CNN, (1.0,), (0,), overrides={"dataset": "folder", "data_dir": str(folder)})
    say_notes()
    assert runs[0].config.per_class is None and runs[0].extra["train_images"] == 16
    note = capsys.readouterr().err
    assert "per_class=100 of preset 'own_models/convmixer_small' is more than the data holds" in note
    assert "class 'class0' has only 8 training images" in note and len(note.splitlines()) == 1


def test_the_users_per_class_the_folder_cannot_hold_is_refused_before_any_run(tmp_path):
    folder = write_folder(tmp_path / "photos", per_class=10, side=8)
    given = {"dataset": "folder", "data_dir": str(folder), "per_class": 9}
    with pytest.raises(
        ConfigError, match=r"^--method cnn: per_class=9 but class 'class0' has only 8 .*at most 8"
    ):
        efficiency_runs(CNN, (1.0,), (0,), overrides=given)


def test_a_failed_run_is_left_out_of_the_report_with_the_first_line_of_its_reason(tmp_path):
    run_dir = tmp_path / "grid" / "cnn" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    reason = "per_class=100 but class 0 has only 48 training images; lower per_class\nsecond line"
    (run_dir / "failed.json").write_text(json.dumps({"reason": reason}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert find_runs(tmp_path / "grid") == []
    [message] = [str(w.message) for w in caught]
    assert message.endswith(
        "left out of the report: it failed: per_class=100 but class 0 has only 48 training images; lower "
        "per_class (its failed.json)"
    )
    assert find_failed(tmp_path / "grid") == [("cnn", 0, reason)]  # the report's table keeps it whole
