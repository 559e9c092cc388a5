"""The model card's init row: the real-image figure the docs quote, a proxy named as one, one short row."""

from __future__ import annotations

import json

from convinit.share.model_card import init_figures

IMPULSE = {  # as an impulse fit on a timm ViT writes it (closed form, measured on LN(P) and on real images)
    "scheme": "impulse", "solver": "closed_form", "pseudo_input": "LN(P)", "mean_mass": 0.973,
    "mean_argmax_agreement": 0.98, "mean_weight_scale": 20.4, "seconds": 0.42,
    "real_pass": {"images": 64, "mean_mass": 0.79, "mean_argmax_agreement": 0.90, "mean_entropy": 0.4},
    "real_pass_held_out": {"images": 42, "mean_mass": 0.7517, "mean_argmax_agreement": 0.882,
                           "mean_entropy": 0.41, "mean_distance": 2.36},
}  # fmt: skip


def test_the_init_row_gives_the_held_apart_real_image_mass_and_names_the_proxy(tmp_path):
    (tmp_path / "init_report.json").write_text(json.dumps(IMPULSE))
    row = init_figures(tmp_path)
    assert row.startswith("target mass 0.75, argmax agreement 0.88 on 42 real images held apart from the fit")
    assert "proxy: mass 0.97 on the pseudo-input LN(P) alone" in row
    assert "weight_scale" not in row and "seconds" not in row and len(row) < 160


def test_an_init_without_target_offsets_gives_its_maps_entropy_and_distance(tmp_path):
    report = {
        "scheme": "random",
        "real_pass_held_out": {"images": 42, "mean_entropy": 0.9999, "mean_distance": 3.54},
    }
    (tmp_path / "init_report.json").write_text(json.dumps(report))
    assert init_figures(tmp_path) == "row entropy 1.00, distance (patches) 3.54 on 42 real images"
    (tmp_path / "init_report.json").write_text(json.dumps({"scheme": "random"}))  # no attention (ConvMixer)
    assert init_figures(tmp_path) == "-"
