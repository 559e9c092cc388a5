"""The order of an epoch: a seeded permutation dealt to ranks, the same for both data paths."""

from __future__ import annotations

import pytest
import torch

from convinit.data.device_loader import DeviceLoader
from convinit.data.epoch_order import epoch_order


def test_without_repeats_an_epoch_is_a_seeded_permutation_cut_and_dealt_to_ranks():
    n, world = 23, 2
    permutation = torch.randperm(n, generator=torch.Generator().manual_seed(5 * 100_003 + 3))
    cut = permutation[: n - n % world]
    for rank in range(world):
        ours = [index for index, _ in epoch_order(n, 5, 3, True, rank, world, repeats=1, drop_last=True)]
        assert ours == cut[rank::world].tolist()
        device = DeviceLoader(torch.arange(n)[:, None], torch.arange(n), 4, shuffle=True, drop_last=True,
                              seed=5, rank=rank, world_size=world)  # fmt: skip
        device.set_epoch(3)
        assert device.order().tolist() == ours  # both data modes see the same samples


def test_repeated_augmentation_puts_each_images_copies_on_different_ranks_and_keeps_epoch_length():
    pytest.importorskip("timm.data")  # repeats are timm's RepeatAugSampler
    n, ranks = 30, 3
    orders = [epoch_order(n, 0, 1, True, rank, ranks, repeats=3, drop_last=True) for rank in range(ranks)]
    assert all(len(order) == n // ranks for order in orders)  # the epoch is no longer than without repeats
    for step in range(n // ranks):
        images = {orders[rank][step][0] for rank in range(ranks)}
        assert len(images) == 1  # the three copies of one image, one per rank, at the same step
    positions = [pos for order in orders for _, pos in order]
    assert len(set(positions)) == len(positions)  # so every copy gets its own augmentation seed


@pytest.mark.parametrize("n", [300, 1000])
def test_repeated_augmentation_keeps_a_small_sets_whole_epoch_instead_of_rounding_it_to_256(n):
    pytest.importorskip("timm.data")
    order = epoch_order(n, 0, 1, True, 0, 1, repeats=3, drop_last=True)
    assert len(order) == n  # DeiT's sampler would give 256 and 768: 15 % and 23 % of the epoch dropped
    images = [index for index, _ in order]
    assert len(set(images)) == -(-n // 3)  # a third as many distinct images, each in 3 copies
