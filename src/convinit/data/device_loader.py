"""A device-resident loader: the whole uint8 dataset sits on the training device as one tensor.

Batches are index slices of that tensor, so an epoch costs one `randperm` and no per-image Python.
Shuffling uses its own generator seeded by (seed, epoch): the data order of any epoch is known in
advance, which makes resumed runs see exactly the batches an uninterrupted run would.

Distributed (`rank`, `world_size`): rank r takes positions r, r + W, r + 2W, ... of the epoch's order.
Without `drop_last` the shards partition the data exactly (evaluation counts every sample once; ranks
may differ by one sample). With `drop_last` (training) the order is first cut to a multiple of W, so
every rank gets n // W samples and takes the same number of steps, which DDP's all-reduce requires.

Repeated augmentation (`repeats` > 1, DeiT's RASampler) and `start_batch` (resuming mid-epoch without
touching the skipped batches) behave exactly as in the streamed loader (`data/streamed_loader.py`): both
take each epoch's order from `data/epoch_order.py`, so a run sees the same samples in either data mode.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from convinit.data.epoch_order import epoch_order


class DeviceLoader:
    """Iterate (uint8 images, labels) batches of tensors that already live on `device`."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        device: torch.device | str = "cpu",
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        repeats: int = 1,
    ):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank} and world_size {world_size}")
        self.images = images.to(device)
        self.labels = labels.to(device)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.repeats = repeats
        self.epoch = 0
        self.start_batch = 0  # skip this many batches of the next epoch (resuming mid-epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def host_order(self) -> list[int]:
        """This epoch's sample order (this rank's share of it when distributed), on the host."""
        n = len(self.labels)
        args = (self.shuffle, self.rank, self.world_size, self.repeats, self.drop_last)
        return [index for index, _ in epoch_order(n, self.seed, self.epoch, *args)]

    def order(self) -> torch.Tensor:
        """`host_order` on the data's device, copied without making the host wait: from pinned memory
        where CUDA is available (the copy overlaps the last steps of the previous epoch)."""
        indices = torch.tensor(self.host_order(), dtype=torch.long)
        device = self.images.device
        if device.type == "cuda" and torch.cuda.is_available():
            indices = indices.pin_memory()
        return indices.to(device, non_blocking=True)

    def shard_size(self) -> int:
        """Number of samples this rank sees per epoch (counted on the host: no copy to the device)."""
        n = len(self.labels)
        if self.repeats > 1:
            return len(self.host_order())
        return n // self.world_size if self.drop_last else len(range(self.rank, n, self.world_size))

    def __len__(self) -> int:
        n = self.shard_size()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order, start, self.start_batch = self.order(), self.start_batch, 0
        for i in range(start, len(self)):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.images[idx], self.labels[idx]
