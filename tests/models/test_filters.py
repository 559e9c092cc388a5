"""Filter banks and convolution matrices (docs/method.md §1 and §3), checked against conv2d."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.models.filters import (
    assign_heads,
    box_filter,
    centre_first_offsets,
    conv_matrix,
    default_random_filter,
    filter_bank,
    fixed_filter_scale,
    gaussian_filter,
    impulse_conv_matrix,
    impulse_filter,
    kernel_offsets,
    ones_filter,
    row_offsets,
    target_keys,
)


@pytest.mark.parametrize("kernel_size", [3, 5, 7])
@pytest.mark.parametrize("grid", [(6, 6), (5, 8)])
def test_conv_matrix_times_patch_features_equals_conv2d(kernel_size, grid):
    gen = torch.Generator().manual_seed(kernel_size)
    filt = torch.randn(kernel_size, kernel_size, generator=gen)
    features = torch.randn(3, *grid, generator=gen)  # 3 channels on the patch grid
    # conv2d is cross-correlation: out[i, j] = sum w[a, b] x[i + a - k//2, j + b - k//2]
    expected = F.conv2d(features[:, None], filt[None, None], padding=kernel_size // 2)[:, 0]  # (3, r, c)
    matrix = conv_matrix(filt, grid)  # (N, N)
    got = (matrix @ features.flatten(1).T).T.reshape(3, *grid)  # patches rows first, as patchify orders them
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("offset", [(0, 0), (1, -2), (-2, 2)])
def test_impulse_conv_matrix_is_the_conv_matrix_of_the_impulse_filter(offset):
    grid = (5, 7)
    assert torch.equal(impulse_conv_matrix(offset, grid), conv_matrix(impulse_filter(5, offset), grid))


def test_impulse_rows_point_at_the_offset_and_border_rows_are_zero():
    grid, offset = (4, 6), (1, -1)
    matrix = impulse_conv_matrix(offset, grid)
    keys, inside = target_keys(offset, grid)
    assert torch.equal(matrix.sum(1), inside.float())  # one-hot inside the grid, all-zero rows outside
    assert torch.equal(matrix.argmax(1)[inside], keys[inside])
    # the inverse view recovers the offset from every row that has a target
    assert (row_offsets(matrix, grid)[inside] == torch.tensor(offset)).all()


def test_centre_first_order_starts_at_the_centre_then_the_four_neighbours():
    order = centre_first_offsets(3)
    assert order[0] == (0, 0)
    assert set(order[1:5]) == {(-1, 0), (0, -1), (0, 1), (1, 0)}
    assert sorted(order) == sorted(kernel_offsets(3)) and len(order) == 9


def test_single_filters_have_their_definitions():
    gen = torch.Generator().manual_seed(0)
    impulse = impulse_filter(5, generator=gen)
    assert impulse.sum() == 1 and impulse.count_nonzero() == 1
    box = box_filter(5, 7, gen)
    assert box.count_nonzero() == 7 and set(box.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(ones_filter(3), torch.ones(3, 3))
    gauss = gaussian_filter(5, 0.5, gen)
    peak = divmod(int(gauss.argmax()), 5)
    assert gauss[peak] == 1.0
    assert gauss[peak[0], (peak[1] + 1) % 5] <= math.exp(-0.5 * 1 / 0.5) + 1e-6
    rand = default_random_filter(5, gen)
    assert rand.abs().max() <= 1 / 5


def test_narrow_gaussians_tend_to_impulses_and_wide_ones_to_flat_filters():
    gen = torch.Generator().manual_seed(1)
    narrow = gaussian_filter(5, 0.01, gen)
    assert narrow.count_nonzero() == 1 or narrow.sort(descending=True).values.flatten()[1] < 1e-6
    wide = gaussian_filter(5, 100.0, gen)
    assert wide.min() > 0.9


def test_filter_bank_shares_heads_filters_out_over_channels():
    gen = torch.Generator().manual_seed(0)
    bank = filter_bank("impulse", 5, channels=12, heads=4, generator=gen)  # (12, 5, 5)
    assert bank.shape == (12, 5, 5)
    for channel in range(12):
        assert torch.equal(bank[channel], bank[channel % 4])
    assert torch.equal(assign_heads(3, 8), torch.arange(3))  # heads >= channels: one filter each


def test_fixed_filter_scale_is_the_official_multiplier():
    k = 5
    assert fixed_filter_scale(impulse_filter(k, (0, 0)), k) == pytest.approx(math.sqrt(1 / k))
    assert fixed_filter_scale(box_filter(k, 4), k) == pytest.approx(math.sqrt(1 / (4 * k)))


def test_bad_filter_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="odd positive"):
        kernel_offsets(4)
    with pytest.raises(ConfigError, match="box filter needs"):
        box_filter(3, 10)
    with pytest.raises(ConfigError, match="variance must be > 0"):
        gaussian_filter(3, 0.0)
    with pytest.raises(ConfigError, match="unknown filter kind"):
        filter_bank("sobel", 3, 4)


def test_random_assignment_draws_each_channels_filter_uniformly_with_replacement():
    gen = torch.Generator().manual_seed(0)
    assigned = assign_heads(4096, 8, "random", gen)
    counts = torch.bincount(assigned, minlength=8)
    assert assigned.min() >= 0 and assigned.max() < 8
    assert (counts - 512).abs().max() < 120  # binomial(4096, 1/8): sd 21
    assert not torch.equal(assigned, assign_heads(4096, 8))  # not the balanced c mod heads
    with pytest.raises(ConfigError, match="'sorted'"):
        assign_heads(4, 2, "sorted")
