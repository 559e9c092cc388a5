"""A checkpoint can never run code: a crafted train_state.pt is refused before anything executes.

The payload is a pickle whose `__reduce__` calls `open(MARKER, "w")`: loading it the unsafe way
creates the marker file (checked first, so the tests cannot pass on a dud). The manifest is updated
to the crafted file's size and hash, as an attacker who can write the folder would, so the
integrity check passes and only `torch.load(weights_only=True)` stands in the way.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil

import pytest
import torch

from convinit.cli import main
from convinit.errors import ConfigError
from convinit.runs.checkpoint import list_checkpoints, load_train_state, sha256, verify_checkpoint


class CreatesFile:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def crafted_bytes(fmt: str, marker, tmp_path) -> bytes:
    state = {"epoch": 3, "step": 0, "optimizer": CreatesFile(marker)}
    if fmt == "raw-pickle":
        return pickle.dumps(state, protocol=2)  # the protocol torch.load's legacy reader expects
    torch.save(state, tmp_path / "crafted.pt")  # torch's zip format, data.pkl inside
    return (tmp_path / "crafted.pt").read_bytes()


def plant(checkpoint, data: bytes) -> None:
    """Replace train_state.pt and fix the manifest so the integrity check passes."""
    (checkpoint / "train_state.pt").write_bytes(data)
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["files"]["train_state.pt"] = {"size": len(data), "sha256": sha256(checkpoint / "train_state.pt")}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    assert verify_checkpoint(checkpoint) is None


@pytest.mark.parametrize("fmt", ["torch-zip", "raw-pickle"])
def test_the_crafted_file_runs_code_when_loaded_unsafely(tmp_path, fmt):
    marker = tmp_path / "pwned"
    (tmp_path / "state.pt").write_bytes(crafted_bytes(fmt, marker, tmp_path))
    try:
        torch.load(tmp_path / "state.pt", weights_only=False)
    except RuntimeError:  # a raw pickle is no torch file, but torch has unpickled (and run) it by then
        assert fmt == "raw-pickle"
    assert marker.exists()


@pytest.mark.parametrize("fmt", ["torch-zip", "raw-pickle"])
@pytest.mark.parametrize("command", ["resume", "eval"])
def test_crafted_train_state_is_refused_with_one_line_and_never_run(
    tmp_path, exact_reference, capsys, fmt, command
):
    run_dir, marker = tmp_path / "run", tmp_path / "pwned"
    shutil.copytree(exact_reference, run_dir)
    checkpoint = list_checkpoints(run_dir)[-1]
    plant(checkpoint, crafted_bytes(fmt, marker, tmp_path))

    argv = (
        ["train", "--resume", str(run_dir), "--no-progress"]
        if command == "resume"
        else ["eval", str(run_dir)]
    )
    assert main(argv) == 2
    assert not marker.exists()
    file = checkpoint / "train_state.pt"
    err = capsys.readouterr().err
    head = (
        f"convinit: error: refusing to load {file}: it holds Python objects beyond tensors and plain values"
    )
    tail = (
        f", which could run code; it was not written by convinit, delete {checkpoint} or use a trusted copy\n"
    )
    assert err.startswith(head) and err.endswith(tail) and err.count("\n") == 1
    assert re.fullmatch(
        r"( \([\w.]+\))?", err[len(head) : -len(tail)]
    )  # the refused global, if torch names it


def test_the_refusal_of_a_malicious_pickle_names_the_global_it_wanted(tmp_path):
    class RunsCode:
        def __reduce__(self):
            return (os.system, ("true",))

    torch.save({"epoch": 1, "payload": RunsCode()}, tmp_path / "train_state.pt")
    with pytest.raises(ConfigError, match=r"\((posix|os)\.system\)"):
        load_train_state(tmp_path)
