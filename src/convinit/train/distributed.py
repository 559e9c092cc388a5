"""DistributedDataParallel under torchrun: which rank this is, and the few collectives the loop needs.

`torchrun --nproc_per_node N -m convinit train ...` sets RANK/WORLD_SIZE/LOCAL_RANK; the trainer then
starts a process group (nccl on GPUs, gloo on the CPU), gives each rank its shard of the device-resident
data and a batch of batch_size / N, and lets rank 0 alone write metrics, checkpoints and progress.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def is_main_rank() -> bool:
    """Rank 0, or a process outside torchrun: the one that writes the run directory."""
    return int(os.environ.get("RANK", "0")) == 0


def setup_distributed(use_cuda: bool) -> DistributedContext:
    """The context torchrun describes in the environment; starts the process group once."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    context = DistributedContext(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(context.local_rank)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return context


def barrier(context: DistributedContext) -> None:
    if context.enabled:
        dist.barrier()


def sum_across_ranks(values: list[float], context: DistributedContext, device: torch.device) -> list[float]:
    """Element-wise sum of `values` over all ranks (identity on one process)."""
    if not context.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()
