"""DeviceLoader: whole-tensor batches whose order depends only on (seed, epoch), sharded by rank."""

import pytest
import torch

from convinit.data import DeviceLoader

N = 23


def make_loader(**kwargs) -> DeviceLoader:
    images = torch.arange(N, dtype=torch.uint8).view(N, 1, 1, 1).repeat(1, 1, 2, 2)  # image i is all i
    labels = torch.arange(N) * 10
    return DeviceLoader(images, labels, **{"batch_size": 4, **kwargs})


def epoch_indices(loader: DeviceLoader) -> list[int]:
    seen = []
    for images, labels in loader:
        assert torch.equal(labels, images[:, 0, 0, 0].long() * 10)  # images and labels stay paired
        seen += images[:, 0, 0, 0].tolist()
    return seen


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_sample_is_seen_exactly_once_per_epoch(shuffle):
    loader = make_loader(shuffle=shuffle, seed=5)
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert sorted(epoch_indices(loader)) == list(range(N))
    assert len(loader) == 6  # ceil(23 / 4)


def test_unshuffled_order_is_file_order():
    assert epoch_indices(make_loader()) == list(range(N))


def test_shuffled_order_depends_only_on_seed_and_epoch():
    a, b = make_loader(shuffle=True, seed=1), make_loader(shuffle=True, seed=1)
    a.set_epoch(4)
    first = epoch_indices(a)
    torch.manual_seed(999)  # the global RNG plays no part
    epoch_indices(b)  # a fresh loader at another epoch, then set to the same epoch
    b.set_epoch(4)
    assert epoch_indices(b) == first
    assert epoch_indices(a) == first  # iterating again repeats the epoch


def test_shuffled_order_changes_with_epoch_and_with_seed():
    loader = make_loader(shuffle=True, seed=1)
    orders = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        orders.append(epoch_indices(loader))
    other_seed = make_loader(shuffle=True, seed=2)
    assert orders[0] != orders[1] != orders[2]
    assert epoch_indices(other_seed) != orders[0]


def test_drop_last_yields_only_full_batches():
    loader = make_loader(shuffle=True, drop_last=True)
    sizes = [len(labels) for _, labels in loader]
    assert sizes == [4] * 5 and len(loader) == 5
    assert len(set(epoch_indices(loader))) == 20


def test_without_drop_last_the_final_batch_is_partial():
    assert [len(labels) for _, labels in make_loader()] == [4, 4, 4, 4, 4, 3]


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_rank_shards_partition_the_data(world_size):
    shards = []
    for rank in range(world_size):
        loader = make_loader(shuffle=True, seed=3, rank=rank, world_size=world_size)
        loader.set_epoch(2)
        shards.append(epoch_indices(loader))
        assert len(shards[-1]) == loader.shard_size()
    everything = sum(shards, [])
    assert sorted(everything) == list(range(N))  # disjoint and complete


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_drop_last_gives_every_rank_the_same_number_of_full_batches(world_size):
    loaders = [
        make_loader(batch_size=2, shuffle=True, drop_last=True, seed=3, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    assert len({len(loader) for loader in loaders}) == 1  # DDP needs equal step counts
    shards = [epoch_indices(loader) for loader in loaders]
    assert len({len(shard) for shard in shards}) == 1
    everything = sum(shards, [])
    assert len(everything) == len(set(everything))  # still disjoint


def test_invalid_loader_arguments_raise():
    with pytest.raises(ValueError):
        make_loader(rank=2, world_size=2)
    with pytest.raises(ValueError):
        make_loader(batch_size=0)
    with pytest.raises(ValueError):
        DeviceLoader(torch.zeros(3, 1, 1, 1), torch.zeros(2), batch_size=1)
