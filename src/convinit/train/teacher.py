"""DeiT's hard distillation: the frozen teacher whose argmax is a second target."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.pretrained import from_pretrained
from convinit.train.opening import open_run


def load_teacher(teacher: str | None, num_classes: int, device: torch.device) -> nn.Module | None:
    """The frozen teacher for hard distillation (the config's `teacher`): a training run, at its newest
    checkpoint (opened as every run is reopened), or a saved model (`convinit export`)."""
    if teacher is None:
        return None
    path = Path(teacher)
    if (path / "config.yaml").is_file():
        opened = open_run(path, data=False)  # not reseeding this run's generators
        model, classes = opened.model, len(opened.record["classes"])
    else:
        model = from_pretrained(path)
        classes = model.model_kwargs["num_classes"]
    if classes != num_classes:
        raise ConfigError(f"teacher {path} predicts {classes} classes but the training set has {num_classes}")
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval().to(device)
