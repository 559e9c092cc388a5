"""Step-0 attention maps beside their impulse targets (analysis/init_maps.py)."""

from __future__ import annotations

import pytest
import torch

from convinit.analysis.init_maps import query_index, save_init_maps, step0_maps
from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.models import create_model


def impulse_model():
    torch.manual_seed(0)
    model = create_model("simplevit", num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=32, depth=2,
                         heads=2, dim_head=16, mlp_dim=32, qk_input="blend", alpha=0.0)  # fmt: skip
    return model, initialize(model, "impulse", kernel_size=3, seed=0)


def test_save_init_maps_writes_a_png_of_maps_beside_targets(tmp_path):
    model, report = impulse_model()
    path = save_init_maps(model, tmp_path / "maps" / "init.png", report=report, query=(1, 2), layers=[1])
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert save_init_maps(model, tmp_path / "plain.png").is_file()  # maps only, no report


def test_step0_maps_are_the_recorded_maps_of_the_first_image():
    model, report = impulse_model()
    maps = step0_maps(model)
    assert len(maps) == 2 and maps[0].shape == (2, 16, 16)
    centre = query_index(None, (4, 4))
    offset = tuple(report["layers"][0]["heads"][0]["offset"])
    target = centre + offset[0] * 4 + offset[1]
    assert maps[0][0, centre].argmax().item() == target


def test_query_and_layer_outside_the_model_are_config_errors(tmp_path):
    model, report = impulse_model()
    with pytest.raises(ConfigError, match="outside the 4x4 patch grid"):
        save_init_maps(model, tmp_path / "x.png", query=(4, 0))
    with pytest.raises(ConfigError, match="layer 5 does not exist"):
        save_init_maps(model, tmp_path / "x.png", layers=[5])
