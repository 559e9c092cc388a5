"""Models people already use, built by name for convinit's trainer: `timm:NAME` and `hf:vit`.

- `timm:NAME`: `timm.create_model(NAME, num_classes=..., img_size=..., in_chans=..., **model_args)`
  (no pretrained weights: convinit trains from scratch), e.g. `model=timm:vit_tiny_patch16_224
  model_args.patch_size=4`.
- `hf:vit`: transformers' `ViTForImageClassification(ViTConfig(image_size=..., num_channels=...,
  num_labels=..., **model_args))`, e.g. `model=hf:vit model_args.hidden_size=192`, wrapped so that it
  returns logits (`TransformersClassifier`).

The image size, channels and classes come from the dataset, as for convinit's own models. The
returned model carries `model_name` and `model_kwargs` like `convinit.create_model`'s.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.registry import create_model
from convinit.system.torchvision_pair import needs_torchvision

PREFIXES = ("timm:", "hf:")
HF_MODELS = ("vit",)


class TransformersClassifier(nn.Module):
    """A transformers image classifier that returns its logits (convinit's trainer takes a tensor)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    @property
    def vit(self) -> nn.Module:
        """The `ViTModel` inside, where `convinit.initialize` finds the attention layers."""
        return self.model.vit

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=images).logits


def is_external(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIXES)


def build_timm(name: str, **kwargs: Any) -> nn.Module:
    if "/" in name or "\\" in name or name.startswith((".", "~")):  # before timm's import: one line at once
        raise ConfigError(
            f"model timm:{name} is a path, not a timm model name (e.g. timm:vit_tiny_patch16_224; "
            "timm.list_models('vit_*') lists them)"
        )
    try:
        with needs_torchvision(f"model timm:{name}"):
            import timm
    except ImportError as exc:
        raise ConfigError(f"model timm:{name} needs timm: pip install timm") from exc
    if name not in timm.list_models():
        raise ConfigError(f"timm has no model {name!r}; list them with timm.list_models('vit_*')")
    return timm.create_model(name, pretrained=False, **kwargs)


def transformers_config_class(name: str) -> type:
    """The transformers config class of `hf:NAME` (ConfigError if unknown or transformers is missing)."""
    if name not in HF_MODELS:
        raise ConfigError(
            f"unknown transformers model hf:{name}; choose one of: hf:{', hf:'.join(HF_MODELS)}"
        )
    try:
        with needs_torchvision(f"model hf:{name}"):
            from transformers import ViTConfig
    except ImportError as exc:
        raise ConfigError("model hf:vit needs transformers: pip install 'convinit[transformers]'") from exc
    return ViTConfig


def build_transformers(name: str, num_classes: int, img_size, in_chans: int, **kwargs: Any) -> nn.Module:
    config_class = transformers_config_class(name)
    from transformers import ViTForImageClassification

    size = img_size if isinstance(img_size, int) else list(img_size)
    patch = kwargs.get("patch_size", 16)
    if any(isinstance(p, int) and p > s for p, s in zip(pairs(patch), pairs(size), strict=False)):
        raise ConfigError(f"model_args.patch_size={patch!r} is larger than the {img_size} image")
    config = config_class(image_size=size, num_channels=in_chans, num_labels=num_classes, **kwargs)
    return TransformersClassifier(ViTForImageClassification(config))


def pairs(size: int | list[int]) -> list[int]:
    """(height, width) of an int-or-pair size."""
    return [size, size] if isinstance(size, int) else list(size)


def build_model_by_name(
    name: str, num_classes: int, img_size: int | tuple[int, int], in_chans: int, **kwargs: Any
) -> nn.Module:
    """convinit's preset `name`, or a `timm:NAME` / `hf:vit` model of the given shape."""
    if not is_external(name):
        return create_model(name, num_classes=num_classes, img_size=img_size, in_chans=in_chans, **kwargs)
    prefix, _, rest = name.partition(":")
    shape = {"num_classes": num_classes, "img_size": img_size, "in_chans": in_chans}
    if prefix == "timm":
        model = build_timm(rest, **shape, **kwargs)
    else:
        model = build_transformers(rest, **shape, **kwargs)
    model.model_name = name
    model.model_kwargs = dict(kwargs, **shape)
    return model
