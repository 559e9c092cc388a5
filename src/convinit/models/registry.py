"""The model registry: named presets, one function each, in the style of timm.

A model file registers its presets with `@register_model`; `create_model(name, ...)` looks the name up
and forwards the common constructor arguments (`num_classes`, `img_size`, `in_chans`) plus any
preset-specific keyword. Unknown names and unknown keywords fail with a one-line `ConfigError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch.nn as nn

from convinit.errors import ConfigError

_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Register `fn` under its own name; the function builds one named preset."""
    if fn.__name__ in _MODELS:
        raise ValueError(f"model {fn.__name__!r} is registered twice")
    _MODELS[fn.__name__] = fn
    return fn


def list_models() -> list[str]:
    """Names of all registered models, sorted."""
    return sorted(_MODELS)


def model_entrypoint(name: str) -> Callable[..., nn.Module]:
    if name not in _MODELS:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(list_models())}")
    return _MODELS[name]


def model_arguments(name: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments a preset accepts (its constructor's signature)."""
    fn = model_entrypoint(name)
    params = dict(inspect.signature(fn).parameters)
    params.pop("kwargs", None)
    return params


def create_model(
    name: str, num_classes: int = 10, img_size: int | tuple[int, int] = 32, in_chans: int = 3, **kwargs
) -> nn.Module:
    """Build the registered model `name`.

    Keyword arguments override the preset's defaults; one it does not accept is a `ConfigError`
    naming the accepted ones. The returned model carries `model.model_name` and `model.model_kwargs`
    so that it can be rebuilt from a saved config.
    """
    fn = model_entrypoint(name)
    accepted = model_arguments(name)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        options = ", ".join(k for k in accepted if k not in ("num_classes", "img_size", "in_chans"))
        raise ConfigError(f"model {name!r} takes no argument {', '.join(unknown)}; it accepts: {options}")
    model = fn(num_classes=num_classes, img_size=img_size, in_chans=in_chans, **kwargs)
    model.model_name = name
    model.model_kwargs = dict(kwargs, num_classes=num_classes, img_size=img_size, in_chans=in_chans)
    return model
