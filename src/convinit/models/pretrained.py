"""Shareable models: a folder with `config.json` (how to rebuild) and `model.safetensors` (the weights).

`model.save_pretrained(dir, classes=..., mean=..., std=...)` writes it for any model built by
`create_model` (the registry records the preset name and arguments); `from_pretrained(dir)` rebuilds the
model and loads the weights (`convinit export RUN_DIR DIR` turns a training run into such a folder).
Nothing is unpickled: the config is JSON and the weights are safetensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch.nn as nn
from safetensors.torch import load_model, save_model

from convinit.errors import ConfigError
from convinit.models.registry import create_model

CONFIG = "config.json"
WEIGHTS = "model.safetensors"


class PretrainedMixin:
    """Adds `save_pretrained` to convinit models."""

    def save_pretrained(self, directory: str | Path, **metadata: Any) -> Path:
        return save_pretrained(self, directory, **metadata)


def save_pretrained(model: nn.Module, directory: str | Path, **metadata: Any) -> Path:
    """Write config.json + model.safetensors; metadata (classes, mean, std, dataset) goes into the config."""
    if not hasattr(model, "model_name"):
        raise ConfigError(
            "save_pretrained needs a model built with convinit.create_model (it records the preset)"
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    kwargs = dict(model.model_kwargs)
    if isinstance(kwargs.get("img_size"), tuple):
        kwargs["img_size"] = list(kwargs["img_size"])
    config = {"model": model.model_name, "model_args": kwargs, **metadata}
    (directory / CONFIG).write_text(json.dumps(config, indent=1, default=list))
    save_model(model, str(directory / WEIGHTS))
    return directory


def read_pretrained_config(directory: Path) -> dict[str, Any]:
    try:
        return json.loads((directory / CONFIG).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{directory} holds no readable {CONFIG}; pass a folder written by save_pretrained"
        ) from exc


def from_pretrained(directory: str | Path) -> nn.Module:
    """Rebuild and load a model saved by `save_pretrained` (a run directory: `convinit export` it first)."""
    directory = Path(directory)
    if (directory / "config.yaml").is_file() and not (directory / CONFIG).is_file():
        raise ConfigError(
            f"{directory} is a training run, not a saved model: `convinit export {directory} DIR`"
        )
    config = read_pretrained_config(directory)
    args = dict(config["model_args"])
    if isinstance(args.get("img_size"), list):
        args["img_size"] = tuple(args["img_size"])
    model = create_model(config["model"], **args)
    load_model(model, str(directory / WEIGHTS))
    model.pretrained_config = config
    return model.eval()
