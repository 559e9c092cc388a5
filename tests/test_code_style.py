"""The codebase stays `ruff check` and `ruff format` clean (CONVENTIONS.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["src", "tests", "benchmarks", "examples"]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
@pytest.mark.parametrize("command", [["ruff", "check"], ["ruff", "format", "--check"]])
def test_code_is_ruff_clean(command):
    result = subprocess.run(command + PATHS, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
