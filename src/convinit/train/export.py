"""A trained run as a shareable model: its newest checkpoint plus the dataset's classes and normalisation."""

from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from convinit.config import load_config
from convinit.data import dataset_info
from convinit.errors import ConfigError
from convinit.train.checkpoint import latest_checkpoint, load_weights
from convinit.train.model_setup import build_model, prepare_data
from convinit.train.ownership import reading_checkpoints


def export_run(run_dir: str | Path, out: str | Path | None = None) -> nn.Module:
    """A run's newest checkpoint as a model carrying `pretrained_config`; saved to `out` if given."""
    run_dir = Path(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    dataset_info(cfg.dataset)
    dataset, _ = prepare_data(cfg)
    img_size = cfg.img_size or dataset.img_size
    model = build_model(cfg, dataset.num_classes, dataset.in_chans, img_size)
    with reading_checkpoints(run_dir):  # a training run cannot prune it while it is read
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            raise ConfigError(f"{run_dir} holds no intact checkpoint yet; train it first")
        load_weights(model, checkpoint)
    metadata = {
        "dataset": cfg.dataset,
        "classes": dataset.classes,
        "mean": list(dataset.mean),
        "std": list(dataset.std),
        "img_size": list(img_size) if isinstance(img_size, tuple) else img_size,
    }
    model.pretrained_config = {"model": cfg.model, **metadata}
    if out is not None:
        model.save_pretrained(out, **metadata)
    return model.eval()
