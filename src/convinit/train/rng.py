"""Every random number generator a run draws from: seeded at the start, saved in each checkpoint and
restored on resume, so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool, rank: int = 0) -> None:
    """Seed every generator with `seed + rank`, as timm does: under DDP each rank draws its own
    augmentations (the data order has its own generator, seeded by `seed` alone: data/device_loader.py)."""
    seed = seed + rank
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


def seed_rank_epoch(seed: int, rank: int, epoch: int) -> None:
    """Under DDP, every generator from (seed, rank, epoch) at each epoch start. Checkpoints hold rank 0's
    generators and DDP checkpoints only at epoch ends, so this is what makes a resumed DDP run draw what
    an uninterrupted one would on every rank, and keeps ranks apart after a resume."""
    (state,) = np.random.SeedSequence([seed, rank, epoch]).generate_state(1)
    random.seed(int(state))
    np.random.seed(int(state))
    torch.manual_seed(int(state))


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2])},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    keys = state["numpy"]["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
