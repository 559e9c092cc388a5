"""The order of one epoch's samples, shared by both data paths so that they see the same samples.

`DeviceLoader` (data on the device) and `StreamLoader` (images decoded by workers) both take each
epoch's order from here: a permutation seeded by (seed, epoch) only, dealt to the distributed ranks,
with DeiT's repeated augmentation when `repeats` > 1. An order that depends on nothing else is what
lets a run resumed mid-epoch, or switched between data modes, see exactly the batches an uninterrupted
run would.
"""

from __future__ import annotations

import numpy as np
import torch

from convinit.system.torchvision_pair import needs_torchvision


def epoch_indices(
    n: int, seed: int, epoch: int, shuffle: bool, rank: int, world_size: int, repeats: int, drop_last: bool
) -> np.ndarray:
    """This rank's file indices for one epoch, in order; the i-th is at global position rank + i * W.

    Without repeats: a `randperm` seeded by (seed, epoch), cut to a multiple of W when `drop_last`;
    with repeats it is timm's `RepeatAugSampler` (DeiT's RASampler) fed the same permutation: its only
    use of the epoch is as the generator's seed. The epoch keeps its length, n samples over the ranks: a
    third as many distinct images (with 3 repeats), each in 3 augmented copies. DeiT's sampler also rounds
    the epoch down to a multiple of 256 samples, which drops nothing that matters on ImageNet but a
    quarter of a 1,000-image set and 15 % of a 300-image one; here it is not rounded (`selected_round=0`).
    """
    global_seed = seed * 100_003 + epoch  # the permutation's seed in both data modes
    if repeats > 1:
        with needs_torchvision("repeated_aug (timm's sampler)"):
            from timm.data.distributed_sampler import RepeatAugSampler

        sampler = RepeatAugSampler(
            range(n), world_size, rank, shuffle=shuffle, num_repeats=repeats, selected_round=0
        )
        sampler.set_epoch(global_seed)
        return np.fromiter(sampler, dtype=np.int64, count=len(sampler))
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(global_seed)).numpy()
    else:
        order = np.arange(n)
    if drop_last:
        order = order[: n - n % world_size]
    return order[rank::world_size]


def epoch_order(
    n: int, seed: int, epoch: int, shuffle: bool, rank: int, world_size: int, repeats: int, drop_last: bool
) -> list[tuple[int, int]]:
    """This rank's (file index, global position) pairs for one epoch (`epoch_indices`)."""
    indices = epoch_indices(n, seed, epoch, shuffle, rank, world_size, repeats, drop_last).tolist()
    return [(index, rank + i * world_size) for i, index in enumerate(indices)]
