"""Checkpoints are atomic: whatever stage a write dies in, the newest intact checkpoint is found.

These tests work on a tiny module (no training): a crash is simulated by raising from one stage of
`save_checkpoint`, which leaves on disk exactly what a SIGKILL at that point would (the stages do no
cleanup on failure). The kill tests in test_kill_resume.py do the same with real processes.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.runs import checkpoint as ckpt
from convinit.runs.checkpoint import latest_checkpoint, list_checkpoints, save_checkpoint, verify_checkpoint
from convinit.runs.run_dir import prepare_run_dir, refuse_if_all_damaged


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way catches it."""


def model_at(value: float) -> nn.Module:
    model = nn.Linear(4, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


def save(run_dir, epoch: int, step: int = 0):
    return save_checkpoint(run_dir, model_at(epoch), {"epoch": epoch, "step": step}, epoch, step)


def names(run_dir) -> list[str]:
    return [p.name for p in list_checkpoints(run_dir)]


@pytest.fixture
def two_checkpoints(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    return tmp_path


def test_only_the_last_two_checkpoints_are_kept(tmp_path):
    for epoch, step in [(1, 0), (1, 5), (2, 0), (2, 7), (3, 0)]:
        save(tmp_path, epoch, step)
    assert names(tmp_path) == ["epoch-0002-step-000007", "epoch-0003"]


def test_manifest_records_size_and_hash_of_every_file(two_checkpoints):
    newest = list_checkpoints(two_checkpoints)[-1]
    manifest = json.loads((newest / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.safetensors", "train_state.pt"}
    for name, entry in manifest["files"].items():
        assert entry["size"] == (newest / name).stat().st_size
        assert entry["sha256"] == ckpt.sha256(newest / name)


def truncate_train_state(d):
    (d / "train_state.pt").write_bytes((d / "train_state.pt").read_bytes()[:50])


def flip_last_byte(d):
    data = bytearray((d / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # same size: only the hash can tell
    (d / "model.safetensors").write_bytes(bytes(data))


DAMAGES = {
    "truncated": (truncate_train_state, "train_state.pt has 50 bytes, expected {size}"),
    "missing-file": (lambda d: (d / "model.safetensors").unlink(), "model.safetensors is missing"),
    "flipped-byte": (flip_last_byte, "model.safetensors does not match its recorded hash"),
    "no-manifest": (lambda d: (d / "manifest.json").unlink(), "no manifest"),
    "garbage-manifest": (lambda d: (d / "manifest.json").write_bytes(b"\xff{x"), "unreadable manifest"),
    "wrong-shape": (lambda d: (d / "manifest.json").write_text('{"files": 3}'), "unreadable manifest"),
    "empty-manifest": (
        lambda d: (d / "manifest.json").write_text('{"files": {}}'),
        "the manifest does not list model.safetensors",
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_newest_checkpoint_falls_back_to_the_previous_with_a_warning(two_checkpoints, damage):
    spoil, problem = DAMAGES[damage]
    newest = list_checkpoints(two_checkpoints)[-1]
    problem = problem.format(size=(newest / "train_state.pt").stat().st_size)
    spoil(newest)
    with pytest.warns(UserWarning) as warned:
        found = latest_checkpoint(two_checkpoints)
    assert found.name == "epoch-0001"
    [message] = [str(w.message) for w in warned]
    assert message == f"checkpoint {newest} is damaged ({problem}); using the previous one, epoch-0001"


def test_no_intact_checkpoint_left_warns_nothing_so_that_resume_prints_only_its_error_line(two_checkpoints):
    """--resume then refuses in one line naming every damaged checkpoint; a warning per checkpoint
    before it would say the same twice."""
    for path in list_checkpoints(two_checkpoints):
        (path / "manifest.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latest_checkpoint(two_checkpoints) is None
    with pytest.raises(
        ConfigError, match=r"every checkpoint of .* \(epoch-0001: no manifest; epoch-0002: no"
    ):
        refuse_if_all_damaged(two_checkpoints)


def crash_after(stage: str):
    """A stand-in for stage `stage` of save_checkpoint that does its work, then dies."""
    original = getattr(ckpt, stage)

    def dying(*args, **kwargs):
        original(*args, **kwargs)
        raise Crash(stage)

    return dying


def half_written(save_model):
    """save_model that dies with its file half written."""

    def dying(model, filename):
        save_model(model, filename)
        with open(filename, "r+b") as f:
            f.truncate(f.seek(0, 2) // 2)
        raise Crash("save_model")

    return dying


@pytest.mark.parametrize(
    "stage, newest",
    [
        ("save_model", "epoch-0002"),  # model.safetensors half written in epoch-0003.tmp
        ("write_files", "epoch-0002"),  # every file written, no manifest
        ("write_manifest", "epoch-0002"),  # complete, but still under the .tmp name
        ("publish", "epoch-0003"),  # renamed; older checkpoints not yet pruned
    ],
)
def test_a_write_killed_at_any_stage_leaves_a_usable_checkpoint(two_checkpoints, monkeypatch, stage, newest):
    dying = half_written(ckpt.save_model) if stage == "save_model" else crash_after(stage)
    monkeypatch.setattr(ckpt, stage, dying)
    with pytest.raises(Crash):
        save(two_checkpoints, 3)
    monkeypatch.undo()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "damaged" warning: .tmp folders are not candidates at all
        found = latest_checkpoint(two_checkpoints)
    assert found.name == newest
    assert torch.load(found / "train_state.pt", weights_only=True)["epoch"] == int(newest[-1])
    save(two_checkpoints, 4)  # the next write succeeds and clears what the dead one left
    assert names(two_checkpoints) == [newest, "epoch-0004"]
    assert not list((two_checkpoints / "checkpoints").glob("*.tmp"))


def test_leftover_tmp_folders_are_ignored_even_if_they_look_complete(two_checkpoints):
    # a complete-looking folder that never got its final name is still an unfinished write
    newest = list_checkpoints(two_checkpoints)[-1]
    stale = two_checkpoints / "checkpoints" / "epoch-0009.tmp"
    stale.mkdir()
    for file in newest.iterdir():
        (stale / file.name).write_bytes(file.read_bytes())
    assert verify_checkpoint(stale) is None
    assert latest_checkpoint(two_checkpoints).name == "epoch-0002"
    save(two_checkpoints, 3)
    assert not stale.exists()


@pytest.mark.parametrize("foreign", ["best_resnet", "keep-epoch-0003", "epoch-0003-final", "epoch-3"])
def test_folders_that_are_not_our_checkpoints_are_never_read_or_pruned(tmp_path, foreign):
    save(tmp_path, 1)
    (tmp_path / "checkpoints" / foreign).mkdir()
    for epoch in (2, 3, 4):
        save(tmp_path, epoch)
    assert (tmp_path / "checkpoints" / foreign).is_dir()
    assert names(tmp_path) == ["epoch-0003", "epoch-0004"]
    assert latest_checkpoint(tmp_path).name == "epoch-0004"


def test_a_copy_of_a_checkpoint_is_not_the_newest_one(tmp_path):
    # `cp -r epoch-0001 keep-epoch-0009` must not become the checkpoint resumed from
    save(tmp_path, 1)
    save(tmp_path, 2)
    shutil.copytree(tmp_path / "checkpoints" / "epoch-0001", tmp_path / "checkpoints" / "keep-epoch-0009")
    assert latest_checkpoint(tmp_path).name == "epoch-0002"


def test_a_checkpoint_renamed_to_another_epoch_fails_verification(tmp_path):
    save(tmp_path, 1)
    (tmp_path / "checkpoints" / "epoch-0001").rename(tmp_path / "checkpoints" / "epoch-0005")
    assert "manifest records epoch 1" in verify_checkpoint(tmp_path / "checkpoints" / "epoch-0005")


def test_checkpoints_are_ordered_by_epoch_and_step_numbers_not_by_string(tmp_path):
    # from epoch 10000 on, string order would put every new checkpoint first and prune it at once
    for epoch, step in [(9999, 0), (9999, 123456), (10000, 0), (10000, 1000000), (10001, 0)]:
        save(tmp_path, epoch, step)
    assert names(tmp_path) == ["epoch-10000-step-1000000", "epoch-10001"]
    assert latest_checkpoint(tmp_path).name == "epoch-10001"


def test_overwrite_removes_our_checkpoints_and_keeps_foreign_folders(tmp_path):
    save(tmp_path, 1)
    (tmp_path / "checkpoints" / "best_resnet").mkdir()
    prepare_run_dir(tmp_path, overwrite=True)
    assert names(tmp_path) == [] and (tmp_path / "checkpoints" / "best_resnet").is_dir()
