"""Experiment trackers beside the always-on metrics files: TensorBoard and Weights & Biases.

`logger: [csv, tensorboard, wandb]` in a config. Every `log_every` steps: mean loss, lr and
images/s; per epoch: the metrics row (accuracy, non-locality, gates); at the start: the init report,
the resolved config and the provenance (git commit); as images: the augmented training samples with
their class names, and the attention maps of one test image at initialisation and after training.
wandb honours WANDB_MODE=offline, so it works without a network. A tracker whose package is missing
fails before training with the pip hint.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from convinit.errors import ConfigError

LOGGERS = ("csv", "tensorboard", "wandb")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_loggers(names: list[str]) -> None:
    for name in names:
        if name not in LOGGERS:
            raise ConfigError(f"unknown logger {name!r}; choose from: {', '.join(LOGGERS)}")
        package = PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            raise ConfigError(f'logger={name} needs the {package} package: pip install "convinit[{name}]"')


def scalars(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardLogger:
    def __init__(self, run_dir: Path, config: dict[str, Any], metadata: dict[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()))
        self.writer.add_text("provenance", "\n".join(f"    {k}: {v}" for k, v in metadata.items()))

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        for key, value in scalars(values).items():
            self.writer.add_scalar(f"step/{key}", value, step)

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None:
        for key, value in scalars(values).items():
            if key != "epoch":
                self.writer.add_scalar(f"epoch/{key}", value, epoch)
        self.writer.flush()

    def log_init(self, report: dict[str, Any]) -> None:
        for key, value in scalars(report).items():
            self.writer.add_scalar(f"init/{key}", value, 0)

    def log_image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.writer.add_image(tag, image, step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, run_dir: Path, config: dict[str, Any], metadata: dict[str, Any]):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(dir=str(run_dir), name=run_dir.name, config={**config, "provenance": metadata},
                              resume="allow", id=run_dir.name.replace("/", "-"))  # fmt: skip

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        self.run.log({f"step/{k}": v for k, v in scalars(values).items()}, step=step)

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None:
        self.run.log({f"epoch/{k}": v for k, v in scalars(values).items()})

    def log_init(self, report: dict[str, Any]) -> None:
        self.run.summary.update({f"init/{k}": v for k, v in scalars(report).items()})

    def log_image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.run.log({tag: self.wandb.Image(image)})

    def close(self) -> None:
        self.run.finish()


class Trackers:
    """Fan-out to the configured trackers (the csv/jsonl metrics are written by the trainer itself)."""

    def __init__(self, names: list[str], run_dir: Path, config: dict[str, Any]):
        from convinit.runs.provenance import provenance

        metadata = provenance()
        kinds = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger}
        self.model_name = config.get("model", "model")
        self.loggers = [kinds[name](run_dir, config, metadata) for name in names if name in kinds]

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log_step(step, values)

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log_epoch(epoch, values)

    def log_init(self, report: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log_init(report)

    def log_image(self, tag: str, image: np.ndarray, step: int) -> None:
        """An (H, W, 3) uint8 picture."""
        for logger in self.loggers:
            logger.log_image(tag, image, step)

    def log_attention(self, tag: str, model: nn.Module, images: torch.Tensor, step: int) -> None:
        """The attention maps of the first of `images` (a picture of `convinit.analysis.plots`); nothing
        for a model without attention layers, or when no tracker would receive it."""
        from convinit.analysis.locality import has_attention_layers
        from convinit.analysis.plots import attention_maps_figure, figure_pixels

        if not self.loggers or not has_attention_layers(model):
            return
        title = f"{self.model_name}, {tag.split('/')[-1]} (step {step})"
        self.log_image(tag, figure_pixels(attention_maps_figure(model, images, title=title)), step)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
