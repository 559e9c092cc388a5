"""Atomic writes leave either the old file or the new one, never a partial file."""

from __future__ import annotations

import os
import stat

import pytest

from convinit.system.atomic import atomic_write_text, atomic_writer


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
