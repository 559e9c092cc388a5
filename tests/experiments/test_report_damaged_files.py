"""`convinit report` reads run files that may be hand-edited or damaged: a row that parses but holds the
wrong types is skipped with a warning naming the file and line; a damaged experiment.json, or a file that
is no regular file or is far too large, is refused in one line naming it. Never a traceback."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from test_report_rows import fake_run

from convinit.cli import main
from convinit.experiments import report
from convinit.experiments.report import find_runs, summarise, write_report
from convinit.runs import metrics


def append(path, *rows) -> None:
    with open(path, "a") as f:
        f.write("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


SKIPPED_ROWS = {  # a row appended to metrics.jsonl (line 4) that the report must skip
    "string test_acc": {"epoch": 4, "test_acc": "abc"},
    "string seconds": {"epoch": 4, "test_acc": 50.0, "seconds": "10"},
    "string epoch": {"epoch": "4", "test_acc": 50.0},
    "list value": {"epoch": 4, "test_acc": [50.0]},
    "boolean epoch": {"epoch": True, "test_acc": 50.0},
    "negative epoch": {"epoch": -1, "test_acc": 50.0},
    "infinite accuracy": '{"epoch": 4, "test_acc": Infinity}',
}


@pytest.mark.parametrize("name", SKIPPED_ROWS)
def test_a_metrics_row_of_wrong_types_is_skipped_naming_the_file_and_line(tmp_path, name):
    fake_run(tmp_path / "a", ["init=random"], 30.0)
    path = tmp_path / "a" / "metrics.jsonl"
    append(path, SKIPPED_ROWS[name])
    with pytest.warns(UserWarning, match=rf"{path}: line\(s\) 4 are damaged and were skipped") as caught:
        rows = summarise(find_runs(tmp_path))
    assert "\n" not in str(caught[0].message)
    assert rows[0]["final_test_acc_mean"] == 30.0 and rows[0]["epochs"] == 2


TRACK_ROWS = {  # a track.jsonl row the bias plot must skip
    "no step": {"epoch": 1, "init_quality/target_mass": 0.5},
    "string step": {"epoch": 1, "step": "15", "init_quality/target_mass": 0.5},
    "string value": {"epoch": 1, "step": 15, "init_quality/target_mass": "high"},
}


@pytest.mark.parametrize("name", TRACK_ROWS)
def test_a_track_row_without_a_step_or_with_string_values_is_skipped(tmp_path, name):
    fake_run(tmp_path / "a", ["init=impulse"], 30.0, bias=(0.8, 0.5))
    path = tmp_path / "a" / "track.jsonl"
    append(path, {"epoch": 1, "step": 10, "init_quality/target_mass": 0.6}, TRACK_ROWS[name])
    with pytest.warns(UserWarning, match=rf"{path}: line\(s\) 2 are damaged"):
        write_report(tmp_path)
    assert (tmp_path / "bias.png").is_file()


def test_a_damaged_init_report_leaves_its_run_out_of_the_init_table_with_a_warning(tmp_path):
    fake_run(tmp_path / "a", ["init=impulse"], 30.0)
    path = tmp_path / "a" / "init_report.json"
    path.write_text(json.dumps({"scheme": "impulse", "real_pass": {"mean_entropy": "low"}}))
    with pytest.warns(
        UserWarning, match=rf"{path} is damaged \(field real_pass.mean_entropy must be a number"
    ):
        assert "Initialisation at step 0" not in write_report(tmp_path).read_text()


EXPERIMENTS = {  # experiment.json fields a report cannot use -> refused naming the field
    "list label": ({"label": ["a", "b"]}, "'label'"),
    "string seed": ({"seed": "abc"}, "'seed'"),
    "string alpha": ({"alpha": "0.1"}, "'alpha'"),
    "nan paper": ({"paper": float("nan")}, "'paper'"),
    "not an object": ([1, 2], "not a JSON object"),
}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_an_experiment_record_of_wrong_types_is_refused_in_one_line(tmp_path, capsys, name):
    record, field = EXPERIMENTS[name]
    fake_run(tmp_path / "a", ["init=random"], 30.0)
    (tmp_path / "a" / "experiment.json").write_text(json.dumps(record))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'a' / 'experiment.json'} is damaged" in err and field in err


def test_metrics_linked_to_an_endless_device_are_refused_unread(tmp_path, capsys):
    fake_run(tmp_path / "a", ["init=random"], 30.0)
    path = tmp_path / "a" / "metrics.jsonl"
    path.unlink()
    os.symlink("/dev/zero", path)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} is not a regular file" in err


def test_metrics_over_the_size_limit_are_refused_unparsed(tmp_path, capsys, monkeypatch):
    fake_run(tmp_path / "a", ["init=random"], 30.0)
    monkeypatch.setattr(metrics, "LOG_LIMIT", 64)  # the real limit, 256 MiB, is too large to write here
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'a' / 'metrics.jsonl'} is over" in err


def test_a_report_folder_that_is_full_is_named_in_the_error(tmp_path, capsys, monkeypatch):
    fake_run(tmp_path / "runs" / "a", ["init=random"], 30.0)

    def disk_full(path, text):  # as a write on a full disk fails: no file name in the error
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(report, "atomic_write_text", disk_full)
    out = tmp_path / "full"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot write the report into {out} (No space left on device)" in err


def test_the_command_prints_a_warning_as_one_line_without_python_source(tmp_path):
    fake_run(tmp_path / "a", ["init=random"], 30.0)
    append(tmp_path / "a" / "metrics.jsonl", {"epoch": 4, "test_acc": "abc"})
    done = subprocess.run(
        [sys.executable, "-m", "convinit", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("convinit: warning: ") for line in lines), lines
    assert any("metrics.jsonl: line(s) 4 are damaged" in line for line in lines)


def test_an_efficiency_record_without_a_group_is_curved_under_its_label(tmp_path):
    from convinit.experiments.efficiency import curves

    fake_run(tmp_path / "a", ["init=random"], 30.0)
    (tmp_path / "a" / "experiment.json").write_text(json.dumps({"label": "mine", "train_images": 100}))
    assert curves(tmp_path) == {"mine": [(100, 30.0)]}
