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
