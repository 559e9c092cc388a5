"""Everything about a run that can be checked or built before its first step: the config's checks
(`validate`, one-line errors before any data is read), the model, its initialisation and a forward
pass on real images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from convinit.config import TrainConfig
from convinit.data import ImageDataset, check_available, load_dataset
from convinit.data.datasets import dataset_options
from convinit.data.subsets import stratified_subset
from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.models.external import build_model_by_name
from convinit.runs.loggers import check_loggers
from convinit.train.device import autocast_dtype, memory_format, resolve_device
from convinit.train.memory_guard import check_fits_in_memory, check_model_args_bounded, largest_batch


def prepare_data(cfg: TrainConfig) -> tuple[ImageDataset, torch.Tensor]:
    """The dataset and the indices of the training images this run uses (a stratified subset or all)."""
    dataset = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, **dataset_options(cfg))
    keep = stratified_subset(
        dataset.train_labels, cfg.train_fraction, cfg.per_class, cfg.seed, cfg.subset_order
    )
    return dataset, keep


def dataset_shape(cfg: TrainConfig) -> dict[str, Any] | None:
    """num_classes / in_chans / img_size of the configured dataset without reading it, where known."""
    known = {
        "digits": (10, 1, 8),
        "mnist": (10, 1, 28),
        "fashion-mnist": (10, 1, 28),
        "cifar10": (10, 3, 32),
        "cifar100": (100, 3, 32),
        "svhn": (10, 3, 32),
        "tiny-imagenet": (200, 3, 64),
    }
    if cfg.dataset not in known:
        return None
    classes, chans, size = known[cfg.dataset]
    return {"num_classes": classes, "in_chans": chans, "img_size": cfg.img_size or size}


def build_model(
    cfg: TrainConfig, num_classes: int, in_chans: int, img_size: int | tuple[int, int]
) -> nn.Module:
    """The configured model (a convinit preset, `timm:NAME` or `hf:vit`: `convinit.models.external`);
    ConfigError if its arguments are unknown or impossible for this data."""
    try:
        return build_model_by_name(
            cfg.model, num_classes=num_classes, img_size=img_size, in_chans=in_chans, **cfg.model_args
        )
    except ConfigError:
        raise
    except (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError) as exc:  # 0 ** -0.5: dim=0
        detail = " ".join(str(exc).split())
        raise ConfigError(f"model {cfg.model!r} cannot be built with {cfg.model_args}: {detail}") from exc


def initialize_model(
    cfg: TrainConfig, model: nn.Module, images: torch.Tensor | None = None
) -> dict[str, Any]:
    """Apply the configured init scheme (fitted on and measured with real `images`); ConfigError if its
    options are unknown or impossible."""
    try:
        return initialize(model, cfg.init, images=images, **cfg.init_args)
    except ConfigError:
        raise
    except (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError) as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"init {cfg.init!r} cannot be applied with {cfg.init_args}: {detail}") from exc


# what a model that builds but cannot run on given images raises (see check_forward)
FORWARD_ERRORS = (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError, IndexError)


def runs_in_fp32(model: nn.Module, images: torch.Tensor) -> bool:
    """Whether the forward pass works without autocast: tells a dtype problem from a shape problem."""
    try:
        model(images)
    except FORWARD_ERRORS:
        return False
    return True


@torch.no_grad()
def check_forward(cfg: TrainConfig, model: nn.Module, images: torch.Tensor, num_classes: int) -> None:
    """One forward pass on real images before any step: a model that builds but cannot run on this
    data (an argument of the right type but an impossible value) fails with one line, not a traceback."""
    model.eval()
    dtype = autocast_dtype(cfg, images.device)
    images = images.contiguous(memory_format=memory_format(cfg))
    try:
        with torch.autocast(images.device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(images)
    except ConfigError:
        raise
    except FORWARD_ERRORS as exc:
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 300 else detail[:297] + "..."  # torch's signature listings
        if dtype is not None and runs_in_fp32(model, images):  # an op with no kernel for this dtype
            raise ConfigError(
                f"model {cfg.model!r} runs in fp32 but not under precision={cfg.precision} autocast on "
                f"{images.device.type}: {detail}; use precision=fp32"
            ) from exc
        shape = "x".join(str(n) for n in images.shape[1:])
        raise ConfigError(
            f"model {cfg.model!r} with {cfg.model_args} cannot run on {shape} images: {detail}"
        ) from exc
    if tuple(logits.shape) != (len(images), num_classes):
        raise ConfigError(
            f"model {cfg.model!r} with {cfg.model_args} returns {tuple(logits.shape)} for "
            f"{len(images)} images of {num_classes} classes; it must return (batch, num_classes)"
        )


def validate(cfg: TrainConfig) -> None:
    """Every check that can run before any data is read or any step taken (one-line errors)."""
    resolve_device(cfg.device)
    if cfg.teacher is not None:
        path = Path(cfg.teacher)
        if not ((path / "config.yaml").is_file() or (path / "config.json").is_file()):
            raise ConfigError(
                f"teacher {path} is neither a run directory nor a saved model (convinit export)"
            )
    check_available(cfg.dataset, cfg.data_dir, cfg.download, **dataset_options(cfg))
    shape = dataset_shape(cfg)
    if shape is not None:
        check_model_args_bounded(cfg.model_args)
        try:  # on the meta device: checks shapes and arguments without allocating weights
            with torch.device("meta"):
                meta_model = build_model_by_name(cfg.model, **shape, **cfg.model_args)
        except ConfigError:
            raise
        except Exception:  # an init that needs real values (e.g. fixed filters): build it for real
            meta_model = None
            build_model(cfg, **shape)
        if meta_model is not None:
            batch = largest_batch(
                cfg.batch_size, cfg.dataset, shape["num_classes"], cfg.per_class, cfg.train_fraction
            )
            check_fits_in_memory(
                meta_model, batch, shape["in_chans"], shape["img_size"], resolve_device(cfg.device)
            )
    check_loggers(cfg.logger)
    if cfg.track:
        from convinit.analysis import get_tracker

        for name in cfg.track:
            get_tracker(name)
