"""Attention maps of a run's model at initialisation and after training, for reports.

The model at initialisation is rebuilt exactly as the trainer built it (same seed, same scheme), so
no extra checkpoint is needed; the trained one comes from the newest checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from convinit.config import load_config
from convinit.data import BatchAugment
from convinit.experiments.grid import slug
from convinit.init import initialize
from convinit.train.checkpoint import latest_checkpoint, load_weights
from convinit.train.model_setup import build_model, prepare_data
from convinit.train.rng import seed_everything


def has_attention(model: nn.Module) -> bool:
    return any(hasattr(m, "record") and hasattr(m, "attention_map") for m in model.modules())


def attention_figures(
    run_dir: str | Path, out: str | Path, label: str, layers: list[int] | None = None
) -> list[Path]:
    """PNGs of the attention maps of one test image (centre query) at init and after training; [] if none."""
    from convinit.analysis.plots import plot_attention_maps

    run_dir, out = Path(run_dir), Path(out)
    cfg = load_config(run_dir / "config.yaml")
    seed_everything(cfg.seed, deterministic=False)
    dataset, _ = prepare_data(cfg)
    img_size = cfg.img_size or dataset.img_size
    model = build_model(cfg, dataset.num_classes, dataset.in_chans, img_size)
    if not has_attention(model):
        return []
    initialize(model, cfg.init, **cfg.init_args)
    size = (img_size, img_size) if isinstance(img_size, int) else img_size
    image = BatchAugment(dataset.mean, dataset.std, size)(dataset.test_images[:1])
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_attention_maps(model.eval(), image, out / f"{slug(label)}-init.png", layers=layers or [0])]
    load_weights(model, latest_checkpoint(run_dir))
    paths.append(
        plot_attention_maps(model.eval(), image, out / f"{slug(label)}-trained.png", layers=layers or [0])
    )
    return paths
