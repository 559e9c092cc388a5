"""An export over an earlier one is atomic at every kill point: the folder is always the earlier export or
the new one, and what a killed export left (hidden `.tmp` / `.old` folders) is put back or removed by the
next export. Kills are simulated by a failure injected before the n-th file-system step, after which
nothing more happens (as after SIGKILL: no cleanup runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from convinit.system import folder_publish
from convinit.system.folder_publish import publish_folder, recover_leftovers

FILES = ("config.json", "model.safetensors")


class Killed(BaseException):
    """The process is gone: raised by every file-system step from the kill point on."""


def writer(version: str):
    def write(folder):
        for name in FILES:
            (folder / name).write_text(f"{name} {version}")

    return write


def version_of(folder) -> str | None:
    texts = {(folder / name).read_text().split()[-1] for name in FILES if (folder / name).is_file()}
    return texts.pop() if len(texts) == 1 and len(list(folder.iterdir())) == len(FILES) else None


def hidden(parent, name) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


@pytest.fixture
def dead_pid() -> int:
    """The PID of a process that has ended: what a killed export's leftovers are named after."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def kill_at(monkeypatch, step: int, pid: int) -> None:
    """From the `step`-th file-system step of an export on, every step raises Killed."""
    calls = {"n": 0}
    steps = {(os, "replace"), (shutil, "rmtree"), (folder_publish, "fsync_dir"), (folder_publish, "exchange")}
    for owner, name in steps:
        original = getattr(owner, name)

        def step_or_die(*args, _original=original, **kwargs):
            calls["n"] += 1
            if calls["n"] > step:
                raise Killed
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, step_or_die)
    monkeypatch.setattr(folder_publish.os, "getpid", lambda: pid)


@pytest.mark.parametrize("can_exchange", [True, False], ids=["exchange", "two-renames"])
def test_an_export_over_an_earlier_one_survives_a_kill_at_every_step(tmp_path, dead_pid, can_exchange):
    for step in range(100):  # kill before step 0, 1, ... until an export runs through
        target = tmp_path / f"step{step}" / "model"
        publish_folder(target, writer("old"), FILES)
        with pytest.MonkeyPatch.context() as monkeypatch:
            if not can_exchange:
                monkeypatch.setattr(folder_publish, "exchange", lambda a, b: False)
            kill_at(monkeypatch, step, dead_pid)
            try:
                publish_folder(target, writer("new"), FILES)
                completed = True
            except Killed:
                completed = False
        if can_exchange:  # the folder is never missing nor mixed
            assert version_of(target) in ("old", "new"), (step, hidden(target.parent, "model"))
        recover_leftovers(target)  # what the next export does first
        assert version_of(target) in ("old", "new"), step
        assert hidden(target.parent, "model") == [], step
        publish_folder(target, writer("next"), FILES)
        assert version_of(target) == "next" and hidden(target.parent, "model") == []
        if completed:
            break
    assert completed and step >= 5  # every step of a whole export was a kill point


def test_the_next_export_puts_back_an_earlier_export_a_kill_left_aside(tmp_path, dead_pid):
    target = tmp_path / "model"
    publish_folder(target, writer("old"), FILES)
    aside = tmp_path / f".model.pid{dead_pid}-abcd1234.old"
    aside.mkdir()
    os.replace(target, aside / "model")  # killed between the two renames
    (tmp_path / f".model.pid{dead_pid}-efgh5678.tmp").mkdir()
    recover_leftovers(target)
    assert version_of(target) == "old" and hidden(tmp_path, "model") == []


def test_leftovers_of_a_running_export_and_of_other_folders_are_left_alone(tmp_path):
    running = tmp_path / f".model.pid{os.getpid()}-abcd1234.tmp"
    other = tmp_path / f".model.v2.pid{os.getpid() + 10**6}-abcd1234.tmp"
    running.mkdir(), other.mkdir()
    publish_folder(tmp_path / "model", writer("1"), FILES)
    assert running.is_dir() and other.is_dir()


def test_the_export_module_imports_first_in_a_fresh_interpreter():
    """What `convinit export` does first: it used to meet the teacher (now in train.step_parts) half-imported
    and stop."""
    result = subprocess.run(
        [sys.executable, "-c", "import convinit.share.export"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr.splitlines()[-1:]
