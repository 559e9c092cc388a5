"""Classify image files with a saved model: decode, resize, normalise, softmax."""

from __future__ import annotations

from pathlib import Path

import torch

from convinit.errors import DataError
from convinit.models.pretrained import from_pretrained


@torch.no_grad()
def predict(model_dir: str | Path, images: list[str | Path], top: int = 3) -> list[list[tuple[str, float]]]:
    """The `top` (class, probability) pairs for each image file."""
    from convinit.data.image_files import decode_images

    model_dir = Path(model_dir)
    if (model_dir / "config.yaml").is_file():  # a training run: its newest checkpoint
        from convinit.train.export import export_run

        model = export_run(model_dir)
    else:
        model = from_pretrained(model_dir)
    config = model.pretrained_config
    size = config.get("img_size") or model.model_kwargs["img_size"]
    size = (size, size) if isinstance(size, int) else tuple(size)
    channels = model.model_kwargs["in_chans"]
    paths = [Path(p) for p in images]
    for path in paths:
        if not path.is_file():
            raise DataError(f"image {path} does not exist")
    batch = decode_images(paths, size=size, grayscale=channels == 1).float().div(255)
    mean = torch.tensor(config.get("mean", [0.5] * channels)).view(1, -1, 1, 1)
    std = torch.tensor(config.get("std", [0.5] * channels)).view(1, -1, 1, 1)
    probabilities = model((batch - mean) / std).softmax(dim=1)
    classes = config.get("classes") or [str(i) for i in range(probabilities.shape[1])]
    values, indices = probabilities.topk(min(top, probabilities.shape[1]), dim=1)
    return [
        [(classes[i], float(v)) for v, i in zip(vs, ix, strict=True)]
        for vs, ix in zip(values.tolist(), indices.tolist(), strict=True)
    ]
