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


def test_init_summary_shows_the_real_pass_figures_of_each_runs_init_report(tmp_path):
    import json

    from convinit.analysis.init_summary import init_markdown, init_rows

    for seed, mass in ((0, 0.7), (1, 0.9)):
        run = tmp_path / f"impulse-{seed}"
        run.mkdir()
        real = {"qk_input": "0.1 * LN(x) + 0.9 * P", "mean_mass": mass, "mean_argmax_agreement": 1.0,
                "mean_entropy": 0.2, "mean_distance": 1.5}  # fmt: skip
        report = {"scheme": "impulse", "solver": "closed_form", "mean_mass": 0.99, "real_pass": real}
        (run / "init_report.json").write_text(json.dumps(report))
    mimetic = tmp_path / "mimetic"
    mimetic.mkdir()
    real = {"qk_input": "x", "mean_entropy": 0.9, "mean_distance": 3.0}
    (mimetic / "init_report.json").write_text(
        json.dumps({"scheme": "mimetic", "variant": "paper1", "real_pass": real})
    )
    rows = init_rows([("impulse", [tmp_path / "impulse-0", tmp_path / "impulse-1"]), ("mimetic", [mimetic])])
    assert rows[0]["init"] == "impulse (closed_form)" and rows[0]["target_mass"] == pytest.approx(0.8)
    assert rows[1]["init"] == "mimetic (paper1)" and rows[1]["target_mass"] is None
    table = init_markdown(rows)
    assert "| impulse | impulse (closed_form) | 0.1 * LN(x) + 0.9 * P | 0.80 | 1.00 | 0.20 | 1.50 |" in table
    assert "0.99" not in table  # the pseudo-input figure is not what the report shows
