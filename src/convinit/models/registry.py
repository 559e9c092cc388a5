"""The model registry: every name `create_model` builds, a row of the preset table or your own builder.

A shipped preset is a row of `convinit.models.presets.PRESETS`: its family, its arguments, what it is.
The family's module registers the builder with `FAMILIES` (the model class, and which of its arguments
a preset lets its caller set), so a preset is built by one rule: the family's builder with the row's
arguments, the caller's keywords over them. A model outside the table (your own builder) is registered
with `register_model`, timm's way: one function whose signature is what the model accepts.

`create_model(name, ...)` looks the name up and forwards the common constructor arguments
(`num_classes`, `img_size`, `in_chans`) plus any preset-specific keyword. Unknown names and unknown
keywords fail with a one-line `ConfigError`. Nothing here imports torch: the names come from the table,
and the family modules are imported the first time a preset is built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convinit.errors import ConfigError
from convinit.models.presets import PRESETS, Preset
from convinit.naming.did_you_mean import suggestion
from convinit.naming.registry import Registry

if TYPE_CHECKING:
    import torch.nn as nn

# Every preset takes these three, each with its own default (timm's constructor convention).
SHAPE_ARGUMENTS = ("num_classes", "img_size", "in_chans")
LISTING = "; `convinit models` lists them"


@dataclass(frozen=True)
class Family:
    """How a family's presets are built: `builder(**arguments)`, the model class or a function.

    `options`: the builder's arguments a preset lets its caller set besides the shape arguments, in
    the order a refusal lists them (None: every argument the builder takes). The others keep the
    builder's defaults, so a preset exposes only what its family means to be varied.
    """

    builder: Callable[..., nn.Module]
    options: tuple[str, ...] | None = None


# each family is registered by the module that defines it (convit.py, deit.py, ...), found on first lookup
FAMILIES: Registry[Family] = Registry("model family", package="convinit.models")
# builders outside the preset table, registered with `register_model`
REGISTERED: Registry[Callable[..., nn.Module]] = Registry("model")


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Register `fn` under its own name: a builder of one model that is not a row of the preset table."""
    if fn.__name__ in PRESETS:
        raise ValueError(f"model {fn.__name__!r} is registered twice")
    params = inspect.signature(fn).parameters
    missing = [k for k in SHAPE_ARGUMENTS if k not in params or params[k].default is inspect.Parameter.empty]
    if missing:
        raise ValueError(f"model {fn.__name__!r} needs a default for {', '.join(missing)}")
    return REGISTERED.add(fn.__name__, fn)


def list_models() -> list[str]:
    """Names of all registered models, sorted: the preset table's and `register_model`'s."""
    return sorted([*PRESETS, *REGISTERED.names()])


def preset_signature(name: str, preset: Preset, family: Family) -> inspect.Signature:
    """What preset `name` accepts: the shape arguments, then its family's options, less the row's fixed
    ones; each defaults to the row's value, else to the builder's. A row that sets an argument its
    callers could not change, or leaves one without a value, is a programming error (ValueError)."""
    params = inspect.signature(family.builder).parameters
    keywords = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    options = family.options
    if options is None:
        options = tuple(k for k, p in params.items() if p.kind in keywords and k not in SHAPE_ARGUMENTS)
    names = [k for k in (*SHAPE_ARGUMENTS, *options) if k not in preset.fixed]
    stray = sorted(set(preset.args) - set(names))
    if stray:
        raise ValueError(
            f"preset {name!r} sets {', '.join(stray)}: its {preset.family} family takes no such option"
        )
    accepted = []
    for key in names:
        default = preset.args.get(key, params[key].default)
        if default is inspect.Parameter.empty:
            raise ValueError(f"preset {name!r} gives no value for {key}")
        accepted.append(params[key].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    return inspect.Signature(accepted)


def preset_entrypoint(name: str) -> Callable[..., nn.Module]:
    """The builder of preset `name`, read from its row now (so a row added at run time counts too)."""
    preset = PRESETS[name]
    family = FAMILIES.get(preset.family)
    signature = preset_signature(name, preset, family)

    def build(*args: Any, **kwargs: Any) -> nn.Module:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return family.builder(**bound.arguments, **preset.fixed)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = preset.description
    build.__signature__ = signature  # type: ignore[attr-defined]
    return build


def model_entrypoint(name: str) -> Callable[..., nn.Module]:
    """The function that builds model `name`; its signature is what the model accepts."""
    if name in PRESETS:
        return preset_entrypoint(name)
    if name in REGISTERED:
        return REGISTERED.get(name)
    raise ConfigError(f"unknown model {name!r}{suggestion(name, list_models(), LISTING)}")


def accepted_arguments(entrypoint: Callable[..., nn.Module]) -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(entrypoint).parameters)
    params.pop("kwargs", None)
    return params


def model_arguments(name: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments a model accepts, with its defaults (its builder's signature)."""
    return accepted_arguments(model_entrypoint(name))


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
    accepted = accepted_arguments(fn)
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
