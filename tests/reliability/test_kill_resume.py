"""A training process killed at any point resumes to exactly the run it would have been.

Each test kills a real `convinit train` process (SIGKILL: no handler runs, nothing is flushed; or
SIGTERM: the trainer stops at a step boundary), resumes it with `convinit train --resume`, and
compares the result with an uninterrupted run (`exact_reference`): bit-identical model and EMA
tensors, identical metrics but for wall-clock figures, no lost or duplicated rows.
"""

from __future__ import annotations

import signal

import pytest
from killable_runs import EXACT_OVERRIDES, assert_same_run, stable_metrics, start_cli, wait_until

from convinit.cli import main
from convinit.config import resolve_config
from convinit.data import MixupCutmix
from convinit.errors import TrainingDiverged
from convinit.runs.checkpoint import list_checkpoints
from convinit.runs.signals import RunInterrupted
from convinit.train import train


def train_args(run_dir) -> list[str]:
    return ["train", *EXACT_OVERRIDES, "--out", str(run_dir), "--no-progress"]


def kill_at_pause(tmp_path, pause: list[str]):
    """Start the run paused at `pause`, SIGKILL it there, return its run directory."""
    run_dir, marker = tmp_path / "run", tmp_path / "paused"
    process = start_cli(train_args(run_dir), wrapper=[*pause, "--marker", str(marker)])
    wait_until(marker.exists, process, "the pause")
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    return run_dir


def resume(run_dir) -> None:
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0


def test_sigkill_mid_epoch_then_resume_reproduces_the_uninterrupted_run(tmp_path, exact_reference):
    run_dir = kill_at_pause(tmp_path, ["--pause-at-step", "15"])  # epoch 2, after its 4th step
    assert [c.name for c in list_checkpoints(run_dir)] == ["epoch-0001"]
    assert [row["epoch"] for row in stable_metrics(run_dir)] == [0, 1]
    resume(run_dir)
    assert_same_run(run_dir, exact_reference)


def test_sigkill_during_the_first_checkpoint_write_then_resume_reproduces_the_uninterrupted_run(
    tmp_path, exact_reference
):
    # No checkpoint is complete, but metrics.jsonl already holds epoch 1's row and init_report.json
    # exists: the restart from scratch must redo the (mimetic) init and must not duplicate the row.
    # A kill during a later write is the same as a mid-epoch kill plus a stale .tmp folder, which
    # test_checkpoint_integrity.py covers stage by stage.
    run_dir = kill_at_pause(tmp_path, ["--pause-in-save", "1"])
    assert list_checkpoints(run_dir) == []
    assert (run_dir / "checkpoints" / "epoch-0001.tmp" / "model.safetensors").is_file()
    assert [row["epoch"] for row in stable_metrics(run_dir)] == [0, 1]
    resume(run_dir)
    assert_same_run(run_dir, exact_reference)


def test_sigterm_exits_143_with_a_step_boundary_checkpoint_then_resume_is_exact(tmp_path, exact_reference):
    # The signal is sent while the run waits before its 15th step (epoch 2, 5th step), so it always
    # lands at the same point: never inside a checkpoint write, whatever the machine's load.
    run_dir, marker = tmp_path / "run", tmp_path / "paused"
    process = start_cli(train_args(run_dir), wrapper=["--pause-at-step", "15", "--marker", str(marker)])
    wait_until(marker.exists, process, "the pause before step 15")
    process.send_signal(signal.SIGTERM)  # the trainer's handler: stop after this step
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, err
    newest = list_checkpoints(run_dir)[-1]
    assert newest.name == "epoch-0001-step-000005" and f"stopped: checkpoint {newest}" in out
    assert not (run_dir / "finished.json").exists()
    resume(run_dir)
    assert_same_run(run_dir, exact_reference)


def test_skipped_nonfinite_steps_count_across_a_resume(tmp_path, monkeypatch):
    # on_nonfinite=skip stops after max_nonfinite_skips; a resume must not reset that count, or an
    # interrupted run trains on where the uninterrupted one stops. Poisoned steps 2, 5 and 7 with a
    # limit of 2: both runs must stop at step 7, the resumed one after a Ctrl-C at step 6.
    calls = {"n": 0, "interrupt": False}
    original = MixupCutmix.__call__

    def poison_and_interrupt(self, images, labels):
        calls["n"] += 1
        if calls["n"] == 6 and calls["interrupt"]:
            signal.raise_signal(signal.SIGINT)  # the trainer stops after this step, with a checkpoint
        out, targets = original(self, images, labels)
        return (out * float("nan") if calls["n"] in (2, 5, 7) else out), targets

    monkeypatch.setattr(MixupCutmix, "__call__", poison_and_interrupt)
    overrides = ["on_nonfinite=skip", "max_nonfinite_skips=2", *EXACT_OVERRIDES]
    with pytest.raises(TrainingDiverged, match="3 non-finite steps"):
        train(resolve_config(None, overrides), run_dir=tmp_path / "straight", progress=False)

    calls.update(n=0, interrupt=True)
    with pytest.raises(RunInterrupted):
        train(resolve_config(None, overrides), run_dir=tmp_path / "resumed", progress=False)
    with pytest.raises(TrainingDiverged, match="3 non-finite steps"):
        train(run_dir=tmp_path / "resumed", resume=True, progress=False)
