"""Every init scheme's report has the same real-pass figures, measured on the same images: `real_pass` on
the batch's first part and `real_pass_held_out` on the quarter held apart (impulse fits on the rest)."""

from __future__ import annotations

import warnings

import pytest
import torch

import convinit
from convinit.init.attention_sites import attention_slots
from convinit.init.measure import real_pass_quality

ARGS = dict(
    num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=16, depth=2, heads=2, dim_head=8, mlp_dim=16
)


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))


def report(scheme: str, images: torch.Tensor) -> dict:
    torch.manual_seed(0)
    model = convinit.create_model("simplevit", **ARGS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convinit.initialize(model, scheme, images=images)


def test_every_scheme_reports_real_pass_and_held_out_figures_on_the_same_images(images):
    reports = {scheme: report(scheme, images) for scheme in ("random", "mimetic", "impulse")}
    for scheme, got in reports.items():
        assert {"real_pass", "real_pass_held_out"} <= set(got), scheme
        for part in ("real_pass", "real_pass_held_out"):
            assert got[part]["images"] == reports["impulse"][part]["images"], (scheme, part)
            assert {"mean_entropy", "mean_distance"} <= set(got[part]), (scheme, part)


def test_mimetics_held_out_figures_are_those_of_the_last_quarter_of_the_batch(images):
    torch.manual_seed(0)
    model = convinit.create_model("simplevit", **ARGS)
    got = convinit.initialize(model, "mimetic", images=images, seed=0)
    direct = real_pass_quality(model, attention_slots(model, "measure"), images[48:])
    assert got["real_pass_held_out"]["mean_entropy"] == pytest.approx(direct["mean_entropy"], abs=1e-6)
    assert got["real_pass_held_out"]["images"] == 16
