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

from convinit.data.source import DataSource
from convinit.errors import ConfigError
from convinit.models.layers import pair
from convinit.models.pretrained import (
    MAX_CHANNELS,
    MAX_INT,
    MAX_NESTING,
    MAX_SIDE,
    image_sides,
    is_count,
    is_number,
    nesting_depth,
    preprocess_problem,
)
from convinit.system.atomic import atomic_write_text
from convinit.system.read_back import read_capped, short_repr

RECORD = "preprocessing.json"
STREAM_INTERPOLATION = "bicubic"  # StreamRecipe's, which the streamed path evaluates with


def eval_preprocess(data: DataSource) -> dict[str, Any]:
    """How the run's evaluation turns an image file into the model's input, before normalising.

    `stretch`: decoded (bilinear) to `decode_size`, the size the set was decoded to, then resized to the
    model's size (`BatchAugment`); `center_crop`: the short side resized to `crop_size / crop_pct`, the
    centre `crop_size` square cut out (timm's evaluation transform).
    """
    if data.mode == "stream":
        return {
            "resize": "center_crop",
            "crop_size": pair(data.img_size)[0],
            "crop_pct": data.crop_pct,
            "interpolation": STREAM_INTERPOLATION,
        }
    return {"resize": "stretch", "decode_size": list(data.test.images.shape[2:])}  # (H, W)


def data_record(data: DataSource) -> dict[str, Any]:
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
        "preprocess": eval_preprocess(data),
        "train_images": data.train_size,
        "test_images": test_images,
    }


def write_data_record(run_dir: Path, data: DataSource) -> None:
    atomic_write_text(Path(run_dir) / RECORD, json.dumps(data_record(data), indent=1))


def read_data_record(run_dir: Path) -> dict[str, Any] | None:
    """The run's record, every field checked (`record_problem`); None for a run that has none (written
    by an older convinit). Export, `predict RUN_DIR` and teachers build on it, so a hand-edited value
    (a zero std, a mean per wrong channel count, an absurd size) is refused before any model computes."""
    path = Path(run_dir) / RECORD
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        record = json.loads(read_capped(path))
        problem = record_problem(record)
    except (OSError, ValueError, RecursionError) as exc:
        problem = f"it is not readable JSON ({' '.join(str(exc).split())[:120]})"
    if problem is not None:
        raise ConfigError(
            f"{path} is damaged: {problem}; it is written when the run starts: "
            f"delete it to rebuild it from the dataset"
        )
    return record


def record_problem(record: Any) -> str | None:
    """The first field of a preprocessing record that is missing or out of type or range, said in words."""
    if not isinstance(record, dict):
        return f"it must hold a JSON object, got {type(record).__name__}"
    if nesting_depth(record) > MAX_NESTING:
        return f"it is nested over {MAX_NESTING} levels deep"
    missing = [
        key for key in ("classes", "in_chans", "img_size", "mean", "std", "preprocess") if key not in record
    ]
    if missing:
        return f"field {missing[0]!r} is missing"
    classes, channels = record["classes"], record["in_chans"]
    if (
        not isinstance(classes, list)
        or not 2 <= len(classes) <= MAX_INT
        or not all(isinstance(name, str) for name in classes)
    ):
        return f"field 'classes' must list 2 or more class names (strings), got {short_repr(classes)}"
    if not is_count(channels) or channels > MAX_CHANNELS:
        return f"field 'in_chans' must be an integer in 1..{MAX_CHANNELS}, got {short_repr(channels)}"
    if image_sides(record["img_size"]) is None:
        return (
            f"field 'img_size' must be 1..{MAX_SIDE} pixels (or [h, w]), got {short_repr(record['img_size'])}"
        )
    for key in ("mean", "std"):
        values = record[key]
        if (
            not isinstance(values, list)
            or len(values) != channels
            or not all(is_number(v) and (key == "mean" or v > 0) for v in values)
        ):
            kind = "positive finite numbers" if key == "std" else "finite numbers"
            wrong = isinstance(values, list) and len(values) != channels
            got = f"{len(values)} values" if wrong else short_repr(values)
            return f"field {key!r} must list {channels} {kind} (one per channel), got {got}"
    problem = preprocess_problem(record["preprocess"])
    if problem is not None or record["preprocess"] is None:
        return f"field {problem or 'preprocess must say how images are resized'}"
    for key in ("train_images", "test_images"):
        value = record.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"field {key!r} must be a count of images, got {short_repr(value)}"
    return None
