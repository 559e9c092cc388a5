"""Classify image files with a saved model (a folder, a Hub name or a run directory).

Every file is checked before any is classified: it must be an image PIL can decode whole, and no larger
than PIL's decompression-bomb limit (refused from the header, before decoding). A model that gives
NaN or infinite scores is refused rather than printing `nan` probabilities.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from convinit.data.image_files import UNREADABLE, open_image, unreadable_image
from convinit.errors import ConfigError, DataError
from convinit.models.pretrained import from_pretrained
from convinit.runs.run_dir import CONFIG_FILE

PREDICT_REMEDY = "pass another image file"  # how a user fixes an image `predict` cannot use


def load_predictor(model: str | Path) -> nn.Module:
    """A run directory's newest checkpoint, a saved model folder, or a Hub model `user/name`."""
    if (Path(model) / CONFIG_FILE).is_file():  # a training run
        from convinit.share.export import export_run

        return export_run(model)
    return from_pretrained(model)


def check_image(path: Path) -> None:
    """One-line DataError unless `path` is a whole image within PIL's pixel limit."""
    if not path.is_file():
        raise DataError(f"image {path} does not exist (or is not a file)")
    with open_image(path, PREDICT_REMEDY) as img:  # over PIL's pixel limit: refused from the header
        try:
            img.load()
        except UNREADABLE as exc:  # not an image, empty, truncated, corrupt
            raise unreadable_image(path, exc, PREDICT_REMEDY) from exc


def model_input(paths: list[Path], model: nn.Module) -> torch.Tensor:
    """The files as the run's evaluation saw them: resized as its `preprocess` says (see
    `convinit.runs.preprocessing_record`), normalised with its mean and std; (N, C, H, W) float."""
    from convinit.data.augmentation.batch_augment import BatchAugment
    from convinit.data.image_files import decode_images, to_mode
    from convinit.models.layers import pair

    config = model.pretrained_config
    channels = model.model_kwargs["in_chans"]
    size = pair(model.model_kwargs["img_size"])  # what the model was built for (config.json agrees)
    mean = tuple(config.get("mean", [0.5] * channels))
    std = tuple(config.get("std", [0.5] * channels))
    how = config.get("preprocess") or {"resize": "stretch", "decode_size": list(size)}
    normalise = BatchAugment(mean, std, size)  # uint8 -> float, resized to the model's size, normalised
    if how["resize"] == "stretch":
        return normalise(decode_images(paths, size=tuple(how["decode_size"]), grayscale=channels == 1))
    from convinit.data.streamed_loader import StreamRecipe

    recipe = StreamRecipe(
        img_size=how["crop_size"],
        mean=mean,
        std=std,
        in_chans=channels,
        interpolation=how["interpolation"],
        crop_pct=how["crop_pct"],
    )
    transform, mode = recipe.eval_transform(), "L" if channels == 1 else "RGB"
    images = []
    for path in paths:
        with open_image(path, PREDICT_REMEDY) as img:
            images.append(transform(to_mode(img, mode, str(path))))  # 16-bit / float scaled, not clipped
    batch = torch.stack(images)
    return batch if batch.is_floating_point() else normalise(batch)  # a transform that leaves uint8


@torch.no_grad()
def predict(model_dir: str | Path, images: list[str | Path], top: int = 3) -> list[list[tuple[str, float]]]:
    """The `top` (class, probability) pairs for each image file, most probable first."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"--top must be a positive number of classes, got {top!r}")
    paths = [Path(p) for p in images]
    for path in paths:
        check_image(path)
    model = load_predictor(model_dir)
    logits = model(model_input(paths, model))
    broken = [str(p) for p, ok in zip(paths, logits.isfinite().all(dim=1).tolist(), strict=True) if not ok]
    if broken:
        raise DataError(
            f"model {model_dir} gives NaN or infinite scores for {', '.join(broken[:3])}; no prediction "
            "printed: check the model folder (export it again)"
        )
    probabilities = logits.softmax(dim=1)
    classes = model.pretrained_config.get("classes") or [str(i) for i in range(probabilities.shape[1])]
    values, indices = probabilities.topk(min(top, probabilities.shape[1]), dim=1)
    return [
        [(classes[i], float(v)) for v, i in zip(vs, ix, strict=True)]
        for vs, ix in zip(values.tolist(), indices.tolist(), strict=True)
    ]
