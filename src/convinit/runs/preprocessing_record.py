"""What a run's model takes as input, recorded when the run starts: `RUN_DIR/preprocessing.json`.

The data source decides the classes, the normalisation and how an image becomes the model's input
(the device path: decoded to the set's size, resized, normalised by the set's own statistics; the
streamed path: timm's resize and centre crop, and the statistics it chose). Export, model cards,
`predict RUN_DIR` and teachers read them from this record, never from the dataset again: recomputing
them could give other values than the run trained with, and would decode a whole streamed set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from convinit.config import TrainConfig
from convinit.data.source import DataSource
from convinit.errors import ConfigError
from convinit.models.layers import pair
from convinit.runs.atomic import atomic_write_text

RECORD = "preprocessing.json"
STREAM_INTERPOLATION = "bicubic"  # StreamRecipe's, which the streamed path evaluates with


def eval_preprocess(data: DataSource, cfg: TrainConfig) -> dict[str, Any]:
    """How the run's evaluation turns an image file into the model's input, before normalising.

    `stretch`: decoded (bilinear) to `decode_size`, the size the set was decoded to, then resized to the
    model's size (`BatchAugment`); `center_crop`: the short side resized to `crop_size / crop_pct`, the
    centre `crop_size` square cut out (timm's evaluation transform).
    """
    if data.mode == "stream":
        return {
            "resize": "center_crop",
            "crop_size": pair(data.img_size)[0],
            "crop_pct": cfg.crop_pct,
            "interpolation": STREAM_INTERPOLATION,
        }
    return {"resize": "stretch", "decode_size": list(data.test.images.shape[2:])}  # (H, W)


def data_record(data: DataSource, cfg: TrainConfig) -> dict[str, Any]:
    """The record of `data`: read from the data source's own attributes, as the run trains with them."""
    img_size = data.img_size
    test_images = len(data.test.images) if hasattr(data.test, "images") else len(data.test.dataset)
    return {
        "mode": data.mode,
        "classes": list(data.classes),
        "in_chans": data.in_chans,
        "img_size": list(img_size) if isinstance(img_size, tuple) else img_size,
        "mean": [float(v) for v in data.mean],
        "std": [float(v) for v in data.std],
        "preprocess": eval_preprocess(data, cfg),
        "train_images": data.train_size,
        "test_images": test_images,
    }


def write_data_record(run_dir: Path, data: DataSource, cfg: TrainConfig) -> None:
    atomic_write_text(Path(run_dir) / RECORD, json.dumps(data_record(data, cfg), indent=1))


def read_data_record(run_dir: Path) -> dict[str, Any] | None:
    """The run's record; None for a run that has none (written by an older convinit)."""
    path = Path(run_dir) / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        needed = ("classes", "in_chans", "img_size", "mean", "std", "preprocess")
        if not isinstance(record, dict) or any(key not in record for key in needed):
            raise ValueError("fields are missing")
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(
            f"{path} is damaged ({' '.join(str(exc).split())[:120]}); it is written when the run starts: "
            f"delete it to rebuild it from the dataset"
        ) from exc
    return record


def run_data_record(run_dir: Path, cfg: TrainConfig) -> dict[str, Any]:
    """The record, or for a run without one the data source rebuilt from its config (on the CPU)."""
    record = read_data_record(run_dir)
    if record is not None:
        return record
    import torch

    from convinit.data.source import build_data

    return data_record(build_data(cfg, torch.device("cpu")), cfg)
