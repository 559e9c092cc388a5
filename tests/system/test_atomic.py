"""Atomic writes leave either the old file or the new one, never a partial file, and never write through a
link."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from convinit.errors import ConfigError
from convinit.system.atomic import TEMP_SUFFIX, append_text, atomic_write_text, atomic_writer, temp_path


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "config.yaml"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path):
    target = tmp_path / "metrics.jsonl"
    target.write_text("row 0\nrow 1\n")
    with pytest.raises(RuntimeError), atomic_writer(target) as f:
        f.write("row 0\n")
        raise RuntimeError("killed")
    assert target.read_text() == "row 0\nrow 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_a_replaced_file_keeps_its_permission_bits(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("old")
    os.chmod(target, 0o644)
    atomic_write_text(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_link_planted_under_the_temporary_name_is_replaced_not_written_through(tmp_path):
    notes, target = tmp_path / "notes.txt", tmp_path / "run" / "metrics.csv"
    notes.write_text("my notes\n")
    target.parent.mkdir()
    temp_path(target).symlink_to(notes)
    atomic_write_text(target, "epoch\n0\n")
    assert notes.read_text() == "my notes\n"
    assert target.read_text() == "epoch\n0\n" and not target.is_symlink()


def test_the_next_write_removes_the_temporary_file_a_killed_writer_left(tmp_path):
    process = subprocess.Popen(["true"])  # its PID has ended, as a SIGKILLed writer's has
    process.wait()
    page = tmp_path / "results.md"
    left = page.with_name(f".{page.name}.{process.pid}{TEMP_SUFFIX}")
    left.write_text("half a page")
    atomic_write_text(page, "the page\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.md"]


def test_an_append_refuses_a_link_and_leaves_its_target_unchanged(tmp_path):
    notes, log = tmp_path / "notes.txt", tmp_path / "track.jsonl"
    notes.write_text("my notes\n")
    log.symlink_to(notes)
    with pytest.raises(ConfigError, match="track.jsonl is a symbolic link"):
        append_text(log, "{}\n")
    assert notes.read_text() == "my notes\n"
