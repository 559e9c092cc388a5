"""A torchvision built for another torch: named in one line with the command that fixes it, and never
imported by a run that does not use it. A stand-in torchvision that raises on import plays the broken one."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import pytest

from convinit.config import resolve_config
from convinit.errors import InstallError
from convinit.models.external import build_model_by_name
from convinit.system import torchvision_pair
from convinit.system.torchvision_pair import fix_command, matching_torchvision
from convinit.train import train

BROKEN = "operator torchvision::nms does not exist"


class BrokenTorchvision(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchvision as a mismatched build behaves: found, and raising as it is imported."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "torchvision":
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise RuntimeError(BROKEN)


@pytest.fixture
def broken_torchvision(monkeypatch):
    """Importing torchvision (or timm, transformers, which import it) raises as a mismatched build does."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("torchvision", "timm", "transformers")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [BrokenTorchvision(), *sys.meta_path])


def test_the_matching_torchvision_is_named_with_the_index_of_torchs_build():
    assert matching_torchvision("2.14.1+cpu") == "0.29.1" and matching_torchvision("2.1.0") == "0.16.0"
    assert fix_command("2.14.1+cpu") == (
        "pip install torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu"
    )
    assert fix_command("2.5.1") == "pip install torchvision==0.20.1"


def test_a_run_without_mixup_trains_and_never_imports_torchvision(
    tmp_path, tiny_overrides, broken_torchvision
):
    run = train(resolve_config(None, [*tiny_overrides, "epochs=1"]), run_dir=tmp_path / "run", progress=False)
    assert run.metrics[-1]["epoch"] == 1
    assert not [name for name in sys.modules if name.split(".")[0] == "torchvision"]


def test_mixup_with_a_mismatched_torchvision_is_refused_in_one_line_before_the_run_folder(
    tmp_path, tiny_overrides, broken_torchvision, monkeypatch
):
    versions = {"torch": "2.14.1+cpu", "torchvision": "0.30.0"}  # pip kept torch, took a newer torchvision
    monkeypatch.setattr(torchvision_pair, "installed_version", versions.get)
    monkeypatch.setattr(torchvision_pair, "torch_version", lambda: versions["torch"])
    with pytest.raises(InstallError) as info:
        train(resolve_config(None, [*tiny_overrides, "mixup=0.8"]), run_dir=tmp_path / "run", progress=False)
    message = str(info.value)
    assert "\n" not in message and BROKEN in message
    assert "torchvision 0.30.0 does not work with torch 2.14.1+cpu" in message
    assert "`pip install torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu`" in message
    assert not (tmp_path / "run").exists()


def test_a_mismatched_pair_that_the_run_does_not_use_is_one_warning_line(
    tmp_path, tiny_overrides, broken_torchvision, monkeypatch, capsys
):
    versions = {"torch": "2.14.1", "torchvision": "0.30.0"}
    monkeypatch.setattr(torchvision_pair, "installed_version", versions.get)
    monkeypatch.setattr(torchvision_pair, "torch_version", lambda: versions["torch"])
    train(resolve_config(None, [*tiny_overrides, "epochs=1"]), run_dir=tmp_path / "run", progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("convinit: warning: torchvision 0.30.0")
    assert "this run does not use it" in warnings[0]


def test_a_timm_model_with_a_broken_torchvision_is_one_line_not_timms_traceback(broken_torchvision):
    with pytest.raises(InstallError, match="does not work with torch .*`pip install .*torchvision==0"):
        build_model_by_name("timm:vit_tiny_patch16_224", num_classes=10, img_size=8, in_chans=1)


def test_the_right_release_of_another_build_is_to_be_reinstalled(
    tmp_path, tiny_overrides, broken_torchvision, monkeypatch
):
    """torchvision 0.29.1 built for CUDA beside a CPU torch 2.14.1: the release matches, the build not."""
    monkeypatch.setattr(torchvision_pair, "installed_version", {"torchvision": "0.29.1"}.get)
    monkeypatch.setattr(torchvision_pair, "torch_version", lambda: "2.14.1+cpu")
    with pytest.raises(InstallError) as info:  # a run that uses torchvision imports it before it starts
        train(resolve_config(None, [*tiny_overrides, "cutmix=1.0"]), run_dir=tmp_path / "run", progress=False)
    assert "reinstall the build of torchvision 0.29.1 matching torch 2.14.1+cpu" in str(info.value)
    assert (
        "`pip install --force-reinstall torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu`"
        in (str(info.value))
    )
    assert not (tmp_path / "run").exists()


def mismatched(monkeypatch, torch: str, vision: str) -> None:
    """The installed pair as its version strings say (the build tag of each included)."""
    monkeypatch.setattr(torchvision_pair, "installed_version", {"torch": torch, "torchvision": vision}.get)
    monkeypatch.setattr(torchvision_pair, "torch_version", lambda: torch)
    monkeypatch.setattr(torchvision_pair, "torchvision_version", lambda: vision)


@pytest.mark.parametrize(
    ("torch", "vision", "disagree"),
    [
        ("2.13.0+cpu", "0.28.0", True),  # the pair: CPU torch, the default index's CUDA torchvision
        ("2.13.0+cpu", "0.28.0+cu128", True),
        ("2.14.1+cu130", "0.29.1+cpu", True),
        ("2.14.1+cpu", "0.30.0+cpu", True),  # another release
        ("2.14.1+cpu", "0.29.1+cpu", False),  # both from the CPU index
        ("2.14.1+cu130", "0.29.1+cu130", False),  # both from the default index
        ("2.14.1", "0.29.1+cu130", False),  # torch not imported yet: its metadata has no tag
    ],
)
def test_a_pair_of_another_release_or_device_build_is_told_from_the_version_strings(
    monkeypatch, torch, vision, disagree
):
    mismatched(monkeypatch, torch, vision)
    assert torchvision_pair.pair_disagrees() is disagree


def test_the_fix_names_the_default_index_pair_for_where_the_cpu_index_cannot_be_reached(monkeypatch):
    mismatched(monkeypatch, "2.13.0+cpu", "0.28.0")
    message = torchvision_pair.pair_message(RuntimeError(BROKEN))
    assert "\n" not in message and "torchvision 0.28.0 does not work with torch 2.13.0+cpu" in message
    cpu_index = "https://download.pytorch.org/whl/cpu"
    assert f"`pip install --force-reinstall torchvision==0.28.0 --index-url {cpu_index}`" in message
    assert message.endswith(
        "where that index cannot be reached, the default index's pair: "
        "`pip uninstall -y torch torchvision && pip install torch==2.13.0 torchvision==0.28.0`"
    )
    mismatched(monkeypatch, "2.5.1", "0.30.0")  # torch from the default index: its own fix is that index
    assert "cannot be reached" not in torchvision_pair.pair_message(RuntimeError(BROKEN))


def test_a_cpu_torch_beside_the_default_indexs_torchvision_warns_once_for_runs_that_do_not_use_it(
    broken_torchvision, monkeypatch, capsys
):
    """The demo's case: its runs never import torchvision; a broken pair of the same release is one line."""
    mismatched(monkeypatch, "2.13.0+cpu", "0.28.0")
    monkeypatch.setattr(torchvision_pair, "_WARNED", set())
    torchvision_pair.check_pair(None)
    torchvision_pair.check_pair(None)  # the next run of the same demo or grid: said already
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("convinit: warning: torchvision 0.28.0 does not work with torch 2.13.0+cpu")
    assert "pip install torch==2.13.0 torchvision==0.28.0" in line and line.endswith(
        "(this run does not use it)"
    )
