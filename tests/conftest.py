"""Fixtures shared across test areas. Keep this small: put area-specific helpers in the test files."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# The suite never touches the network: the Hub libraries run offline, with a throwaway cache
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="convinit-tests-hf-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], True)

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")

requires_fashion_mnist = pytest.mark.skipif(
    not FASHION_DIR.is_dir(),
    reason="Debian's dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)",
)


@pytest.fixture
def tiny_overrides() -> list[str]:
    """Overrides that make the default preset (a ViT on digits) train in a second: 2 epochs of 10 steps."""
    return [
        "epochs=2",
        "batch_size=100",
        "model_args.patch_size=2",
        "model_args.depth=2",
        "model_args.dim=32",
        "model_args.heads=2",
        "model_args.dim_head=16",
        "model_args.mlp_dim=64",
        "warmup_epochs=0",
        "device=cpu",
    ]


@pytest.fixture(scope="session")
def digits():
    """The embedded 8x8 digits dataset (1000 train / 797 test), loaded once per test session."""
    from convinit.data import load_dataset

    return load_dataset("digits")


@pytest.fixture(autouse=True)
def isolated_data_home(tmp_path_factory, monkeypatch):
    """Datasets other than the installed ones are looked for in an empty folder, never in ~/.cache."""
    monkeypatch.setenv("CONVINIT_DATA", str(tmp_path_factory.mktemp("data_home")))
