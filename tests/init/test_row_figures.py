"""Row figures: a map is a convolution only if every query row hits its target, which a mean can hide."""

from __future__ import annotations

import pytest
import torch

from convinit.init.targets import Targets, map_quality, row_figures


def test_one_wrong_row_shows_in_the_worst_row_and_the_share_of_rows_but_barely_in_the_mean():
    targets = Targets.build([(0, 1)], (4, 4))  # one head looking one patch right
    maps = targets.maps.clone().double()  # (1, 16, 16): a perfect impulse convolution
    wrong_row = 5  # query (1, 1): move its weight one patch further right
    maps[0, wrong_row] = 0.0
    maps[0, wrong_row, 7] = 1.0
    quality = map_quality(maps, targets)
    inside_rows = int(targets.inside.sum())  # 12: the last column's target is off the grid
    assert quality["mass"][0] == pytest.approx(1 - 1 / inside_rows)
    assert quality["worst_row_mass"] == [0.0]
    assert quality["rows_on_target"] == [pytest.approx(1 - 1 / inside_rows)]


def test_figures_are_of_the_map_averaged_over_images():
    targets = Targets.build([(0, 0)], (2, 2))
    eye = torch.eye(4, dtype=torch.float64)
    uniform = torch.full((4, 4), 0.25, dtype=torch.float64)
    maps = torch.stack([eye, uniform])[:, None]  # (B=2, H=1, N, N)
    figures = row_figures(maps, targets.keys, targets.inside)
    assert figures["worst_row_mass"] == [pytest.approx(0.625)]  # (1 + 0.25) / 2 at every row
    assert figures["rows_on_target"] == [1.0]
