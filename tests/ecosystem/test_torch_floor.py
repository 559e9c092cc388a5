"""The torch and torchvision floors in pyproject.toml are releases this suite runs on. Everywhere the
installed release must be at or above the floor; in CI (`CI` set, as `.ci/run` does), which runs one
environment, the floor must be the minor release installed there: a newer one would leave the floor
untested, an older floor would claim what nothing ran. A newcomer with a newer torch is not failed by it."""

from __future__ import annotations

import os
import re
from importlib.metadata import version
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def floors() -> dict[str, str]:
    """{package: floor} of the `"torch>=X"` lines of pyproject.toml (no TOML reader before Python 3.11)."""
    return dict(re.findall(r'^\s*"(torch|torchvision)>=([\d.]+)"', PYPROJECT.read_text(), flags=re.M))


def minor(text: str) -> tuple[int, int]:
    major, minor_, *_ = re.match(r"(\d+)\.(\d+)", text).groups()
    return int(major), int(minor_)


@pytest.mark.parametrize("package", ["torch", "torchvision"])
def test_the_declared_floor_is_the_minor_release_this_suite_runs_on(package):
    floor = floors()[package]
    installed = version(package)
    assert minor(installed) >= minor(floor), f"{package} {installed} is older than the declared floor {floor}"
    if not os.environ.get("CI"):
        return
    assert minor(installed) == minor(floor), (
        f"{package} {installed} runs these tests but pyproject.toml declares {package}>={floor}: set the "
        "floor to the oldest release the suite has passed on"
    )
