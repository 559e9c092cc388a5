"""convinit models in timm's registry, whichever of the two is imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("timm")

SCRIPT = """
import {first}, {second}
import timm
# img_size=16: an 8x8 grid fits the 5x5 kernel and fits in seconds (the preset's 16x16 grid takes 5-40 s)
model = timm.create_model("convinit_vit_tiny_patch2_32", num_classes=10, init="impulse", qk_input="blend",
                          alpha=0.0, drop_rate=0.0, drop_path_rate=None, img_size=16)
import torch
assert model(torch.randn(1, 3, 16, 16)).shape == (1, 10)
assert model.init_report["mean_mass"] >= 0.75, model.init_report["mean_mass"]  # pseudo-input, target 0.8
names = timm.list_models("convinit_*")
assert "convinit_convit_tiny" in names and "convinit_simplevit" in names, names
print("ok", len(names))
"""


@pytest.mark.parametrize("first, second", [("convinit", "timm"), ("timm", "convinit")])
def test_timm_creates_convinit_models_with_an_init_scheme(first, second):
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(first=first, second=second)],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("ok")


def test_convinit_does_not_import_timm_by_itself():
    code = "import sys, convinit; assert 'timm' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=300).returncode == 0
