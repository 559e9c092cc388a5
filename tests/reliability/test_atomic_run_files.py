"""Every file in a run directory is replaced atomically, and readers survive damaged ones.

The first test watches every `open()` for writing while a run trains, is resumed (which rewrites
metrics.jsonl), evaluated and reported: each one must go to a temporary name (`.NAME.PID.tmp`, or a
file inside a checkpoint's `*.tmp` folder) that is then renamed, except the one append per epoch to
metrics.jsonl, whose cut last line a reader skips.
"""

from __future__ import annotations

import builtins
import io
import json
import os
from pathlib import Path

import pytest
from killable_runs import EXACT_OVERRIDES

from convinit.cli import main
from convinit.experiments.report import write_report
from convinit.runs.metrics import read_metrics


def written_in_place(path: Path, mode: str) -> bool:
    temporary = path.name.startswith(".") and path.name.endswith(".tmp")
    in_temporary_folder = any(part.endswith(".tmp") for part in path.parent.parts)
    appended_row = path.name == "metrics.jsonl" and mode == "a"
    return not (temporary or in_temporary_folder or appended_row)


@pytest.fixture
def writes(monkeypatch) -> list[tuple[Path, str]]:
    """(path, mode) of every file opened for writing through open() / Path.open()."""
    seen: list[tuple[Path, str]] = []
    real_open = io.open

    def watching_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and any(flag in mode for flag in "wax+"):
            seen.append((Path(file), mode))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", watching_open)
    monkeypatch.setattr(builtins, "open", watching_open)
    return seen


def test_no_file_in_a_run_directory_is_written_in_place(tmp_path, writes):
    run_dir = tmp_path / "run"
    assert main(["train", *EXACT_OVERRIDES, "epochs=2", "--out", str(run_dir), "--no-progress"]) == 0
    (run_dir / "finished.json").unlink()  # killed after its last checkpoint: the resume rewrites metrics
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert main(["eval", str(run_dir), "--device", "cpu"]) == 0
    write_report(tmp_path)
    inside = [(p, m) for p, m in writes if tmp_path in p.parents]
    targets = {p.name[1:].rsplit(".", 2)[0] for p, _ in inside if p.name.endswith(".tmp")}
    assert targets >= {"config.yaml", "metrics.jsonl", "metrics.csv", "finished.json", "report.md"}
    in_place = [f"{p.relative_to(tmp_path)} ({m})" for p, m in inside if written_in_place(p, m)]
    assert not in_place, f"written in place: {in_place}"


def test_a_garbled_metrics_line_keeps_every_intact_row_around_it_and_says_so(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"epoch": e, "test_acc": 10.0 * e}) for e in range(5)]
    rows[2] = rows[2][:9] + "\x00\x00garbage"
    path.write_text("\n".join(rows) + "\n")
    with pytest.warns(UserWarning, match=r"line\(s\) 3 are damaged and were skipped; kept the 4 intact rows"):
        kept = read_metrics(path)
    assert [row["epoch"] for row in kept] == [0, 1, 3, 4]
