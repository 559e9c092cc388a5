"""A run directory has one owner: two real processes never write it at once, readers are never pulled
from under, and a grid's children die with it.

Every test synchronises on files the processes write or locks they hold, never on timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml
from killable_runs import EXACT_OVERRIDES, child_env, start_cli, wait_until

from convinit.cli import main
from convinit.data import source as data_source
from convinit.errors import ConfigError
from convinit.runs.checkpoint import list_checkpoints
from convinit.runs.ownership import own_run_dir, reading_checkpoints


def train_args(run_dir) -> list[str]:
    return ["train", *EXACT_OVERRIDES, "--out", str(run_dir), "--no-progress"]


def lock_is_free(run_dir) -> bool:
    try:
        with own_run_dir(run_dir):
            return True
    except ConfigError:
        return False


def test_a_second_writer_is_refused_with_the_pid_of_the_first(tmp_path, capsys):
    run_dir, marker = tmp_path / "run", tmp_path / "paused"
    first = start_cli(train_args(run_dir), wrapper=["--pause-at-step", "2", "--marker", str(marker)])
    try:
        wait_until(marker.exists, first, "the first run's second step")
        assert main(train_args(run_dir)) == 2
        assert f"{run_dir} is in use by process {first.pid}" in capsys.readouterr().err
        assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
        assert f"is in use by process {first.pid}" in capsys.readouterr().err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert lock_is_free(run_dir), "the kernel releases a killed owner's lock"
    assert list_checkpoints(run_dir) == [], "the refused writers touched nothing"


def test_a_resume_after_the_lock_file_is_deleted_is_refused_while_the_first_trains(tmp_path, capsys):
    run_dir, marker = tmp_path / "run", tmp_path / "paused"
    first = start_cli(train_args(run_dir), wrapper=["--pause-at-step", "2", "--marker", str(marker)])
    try:
        wait_until(marker.exists, first, "the first run's second step")
        (run_dir / ".owner.lock").unlink()  # the lock on the directory itself still holds
        assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
        assert f"{run_dir} is in use by" in capsys.readouterr().err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert lock_is_free(run_dir)


def test_pruning_waits_for_a_reader_that_holds_the_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with reading_checkpoints(run_dir):  # as `convinit eval` holds it while loading a checkpoint
        process = start_cli(train_args(run_dir))
        wait_until((run_dir / "checkpoints" / "epoch-0003").is_dir, process, "the third checkpoint")
        # KEEP is 2: epoch-0001 is due for pruning now, but not while a reader holds the lock
        assert (run_dir / "checkpoints" / "epoch-0001").is_dir()
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert [c.name for c in list_checkpoints(run_dir)] == ["epoch-0002", "epoch-0003"]


def test_a_killed_grid_takes_its_children_with_it(tmp_path):
    spec = {
        "scales": {"small": {"preset": "default", "overrides": {"epochs": 500, "device": "cpu"}}},
        "seeds": [0],
        "rows": [{"label": "a"}, {"label": "b", "overrides": {"lr": 3e-3}}],
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "grid"
    command = [sys.executable, "-m", "convinit", "reproduce", str(tmp_path / "exp.yaml"), "--jobs", "2"]
    grid = subprocess.Popen(
        [*command, "--out", str(out), "--no-progress"],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dirs = [out / "a" / "seed0", out / "b" / "seed0"]
    children = {}
    try:
        for run_dir in run_dirs:  # the epoch-0 row is written while the child holds its run directory
            wait_until((run_dir / "metrics.jsonl").exists, grid, f"a child training {run_dir}")
            children[run_dir] = int((run_dir / ".owner.lock").read_text())
        grid.send_signal(signal.SIGKILL)
        grid.wait()
        for run_dir in run_dirs:
            wait_until(lambda d=run_dir: lock_is_free(d), None, f"the child of {run_dir} to end")
    finally:
        grid.kill()
        for run_dir, pid in children.items():  # only if the test failed: leave no orphan behind
            if not lock_is_free(run_dir):
                os.kill(pid, signal.SIGKILL)


def test_a_signal_before_the_loop_starts_prints_a_stopped_line(tmp_path, monkeypatch, capsys):
    original = data_source.load_dataset

    def interrupted_while_loading(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(data_source, "load_dataset", interrupted_while_loading)
    assert main(train_args(tmp_path / "run")) == 128 + signal.SIGTERM
    out = capsys.readouterr().out
    assert "stopped: by signal 15 outside the training loop, nothing lost" in out
    # the data is read before the run folder is written (every refusal comes first): nothing to resume yet
    assert "run the same command again" in out and not (tmp_path / "run" / "config.yaml").exists()
