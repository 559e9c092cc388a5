"""The model registry: named presets, one function each, in the style of timm.

A model file registers its presets with `@register_model`; `create_model(name, ...)` looks the name up
and forwards the common constructor arguments (`num_classes`, `img_size`, `in_chans`) plus any
preset-specific keyword. Unknown names and unknown keywords fail with a one-line `ConfigError`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from convinit.errors import ConfigError
from convinit.naming.did_you_mean import suggestion

if TYPE_CHECKING:
    import torch.nn as nn

_MODELS: dict[str, Callable[..., nn.Module]] = {}
# Every preset takes these three, each with its own default (timm's constructor convention).
SHAPE_ARGUMENTS = ("num_classes", "img_size", "in_chans")
# the modules whose presets make up the registry; imported on first use, so that `import convinit`
# and `convinit models` need no torch (convinit.models.names lists the names without them)
FAMILIES = ("vit", "convit", "convmixer", "deit")


def load_families() -> None:
    for module in FAMILIES:
        importlib.import_module(f"convinit.models.{module}")


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Register `fn` under its own name; the function builds one named preset."""
    if fn.__name__ in _MODELS:
        raise ValueError(f"model {fn.__name__!r} is registered twice")
    params = inspect.signature(fn).parameters
    missing = [k for k in SHAPE_ARGUMENTS if k not in params or params[k].default is inspect.Parameter.empty]
    if missing:
        raise ValueError(f"model {fn.__name__!r} needs a default for {', '.join(missing)}")
    _MODELS[fn.__name__] = fn
    return fn


def list_models() -> list[str]:
    """Names of all registered models, sorted."""
    load_families()
    return sorted(_MODELS)


def model_entrypoint(name: str) -> Callable[..., nn.Module]:
    load_families()
    if name not in _MODELS:
        hint = suggestion(name, list_models(), "; `convinit models` lists them")
        raise ConfigError(f"unknown model {name!r}{hint}")
    return _MODELS[name]


def model_arguments(name: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments a preset accepts (its constructor's signature)."""
    fn = model_entrypoint(name)
    params = dict(inspect.signature(fn).parameters)
    params.pop("kwargs", None)
    return params


def create_model(
    name: str,
    num_classes: int | None = None,
    img_size: int | tuple[int, int] | None = None,
    in_chans: int | None = None,
    **kwargs,
) -> nn.Module:
    """Build the registered model `name`.

    `num_classes`, `img_size` and `in_chans` default to the preset's own (`convit_tiny` is timm's
    224 px, 1,000-class model; `convit_tiny_patch2_32` a 32 px, 10-class one), so a preset built without
    arguments has the shape its name promises and loads that model's weights. Keyword arguments override
    the preset's defaults; one it does not accept is a `ConfigError` naming the accepted ones. The
    returned model carries `model.model_name` and `model.model_kwargs` (every shape argument resolved)
    so that it can be rebuilt from a saved config.
    """
    fn = model_entrypoint(name)
    accepted = model_arguments(name)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        options = ", ".join(k for k in accepted if k not in SHAPE_ARGUMENTS)
        raise ConfigError(f"model {name!r} takes no argument {', '.join(unknown)}; it accepts: {options}")
    given = {"num_classes": num_classes, "img_size": img_size, "in_chans": in_chans}
    shape = {key: value for key, value in given.items() if value is not None}
    shape = {key: accepted[key].default for key in SHAPE_ARGUMENTS} | shape
    model = fn(**shape, **kwargs)
    model.model_name = name
    model.model_kwargs = dict(kwargs, **shape)
    return model
