"""DeiT's hard distillation: the frozen teacher whose argmax is a second target."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from convinit.config import TrainConfig
from convinit.errors import ConfigError
from convinit.models.pretrained import from_pretrained


def load_teacher(cfg: TrainConfig, num_classes: int, device: torch.device) -> nn.Module | None:
    """The frozen teacher for hard distillation: a training run (newest checkpoint) or a saved model."""
    if cfg.teacher is None:
        return None
    from convinit.share.export import export_run  # here: share.export builds models through train.plan

    path = Path(cfg.teacher)
    teacher = export_run(path) if (path / "config.yaml").is_file() else from_pretrained(path)
    classes = teacher.model_kwargs["num_classes"]
    if classes != num_classes:
        raise ConfigError(f"teacher {path} predicts {classes} classes but {cfg.dataset} has {num_classes}")
    for param in teacher.parameters():
        param.requires_grad_(False)
    return teacher.eval().to(device)
