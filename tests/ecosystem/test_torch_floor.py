"""The torch and torchvision floors in pyproject.toml are releases this suite runs on, the README states
them, and installing the package keeps a torch that meets them. Everywhere the installed release must be
at or above the floor; where .ci/floor runs the suite on the floor pair it installed (CONVINIT_FLOOR_CHECK
set), the floor must be the minor release installed there: an older floor would claim what nothing ran.
.ci/run tests the newest release pip gives; the floor is .ci/floor's check (docs/ecosystem.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


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
    if not os.environ.get("CONVINIT_FLOOR_CHECK"):
        return
    assert minor(installed) == minor(floor), (
        f"{package} {installed} runs these tests but pyproject.toml declares {package}>={floor}: set the "
        "floor to the oldest release the suite has passed on"
    )


def test_the_readme_and_docs_state_the_floor_pyproject_declares():
    torch, vision = floors()["torch"], floors()["torchvision"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"torch >= {torch} and torchvision >= {vision}" in readme
    ecosystem = " ".join((ROOT / "docs" / "ecosystem.md").read_text().split())
    assert f"torch >= {torch} with torchvision >= {vision}" in ecosystem


def dependencies() -> list[str]:
    """The `dependencies = [...]` entries of pyproject.toml."""
    block = re.search(r"^dependencies = \[(.*?)^\]", PYPROJECT.read_text(), flags=re.M | re.S)
    return re.findall(r'"([^"]+)"', block.group(1))


def test_installing_the_package_keeps_the_installed_torch(tmp_path):
    """pip, offline, resolves the package's dependencies against what is installed and would fetch nothing:
    a torch that meets the floor stays (no CUDA build, no nvidia-* packages pulled in beside a CPU one)."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet", "--report"]
    result = subprocess.run([*command, str(report), *dependencies()], capture_output=True, text=True)
    if "No module named pip" in result.stderr:
        pytest.skip("pip is not installed in this environment")
    assert result.returncode == 0, f"pip would have to fetch a dependency:\n{result.stderr[-2000:]}"
    fetched = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert not fetched, f"installing convinit would fetch {fetched}"
