"""A run's resumable state as one object: where it stands, and everything that moves as it trains.

`state_dict()` is what a checkpoint's `train_state.pt` holds (optimiser, schedule, loss scaler, every RNG,
position in the epoch, the epoch's running sums, non-finite steps skipped so far); `load_state_dict()`
puts a resumed run exactly where the interrupted one was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from convinit.train.rng import restore_rng_state, rng_state
from convinit.train.step import StepTotals


@dataclass
class TrainState:
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    totals: StepTotals
    epoch: int = 0
    step: int = 0  # steps of `epoch` already taken
    seconds: float = 0.0  # training seconds of `epoch` before an interruption
    extra: dict[str, Any] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        """Reads the device once (the running sums): call it at checkpoints, not every step."""
        sums = self.totals.read()
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(),
            "epoch": self.epoch,
            "step": self.step,
            "running": {
                "loss": sums["loss"],
                "correct": sums["correct"],
                "seen": sums["seen"],
                "seconds": self.seconds,
            },
            "skipped": sums["skipped"],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):  # fp16 runs only (a disabled scaler saves {})
            self.scaler.load_state_dict(state["scaler"])
        restore_rng_state(state["rng"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.seconds = state["running"].get("seconds", 0.0)
        # absent in checkpoints written before skipped steps were saved
        self.totals.load(state["running"], state.get("skipped", 0))
