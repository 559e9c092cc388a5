"""Every convinit model in timm's registry as `convinit_<name>`, so `timm.create_model` and timm's
training script can build them: `timm.create_model("convinit_vit_tiny_patch2_32", num_classes=10,
init="impulse")`.

Importing timm costs about as much as importing torch, so convinit does not import it: registration
happens at `import convinit` when timm is already loaded, or right after timm is first imported (a
one-shot import hook), or on an explicit `register_with_timm()`.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.nn as nn

PREFIX = "convinit_"
# arguments timm's create_model / train.py pass to every entrypoint, meaningless for convinit presets
TIMM_ONLY = (
    "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "cache_dir", "drop_rate", "drop_block_rate",
    "global_pool", "bn_momentum", "bn_eps", "scriptable", "exportable", "no_jit", "checkpoint_path",
)  # fmt: skip


def timm_entrypoint(name: str):
    """A timm entrypoint building convinit preset `name`, with an optional `init=` scheme."""
    from convinit.init import initialize
    from convinit.models.registry import create_model, model_arguments

    def build(
        pretrained: bool = False, init: str | None = None, init_args: dict | None = None, **kwargs: Any
    ) -> nn.Module:
        if pretrained:
            return exported_model(name, kwargs.get("pretrained_cfg_overlay") or {}, kwargs.get("num_classes"))
        accepted = model_arguments(name)
        kwargs = {
            k: v
            for k, v in kwargs.items()
            if k not in TIMM_ONLY and not (k == "drop_path_rate" and k not in accepted)
        }
        model = create_model(name, **kwargs)
        if init:
            model.init_report = initialize(model, init, **(init_args or {}))
        return model

    build.__name__ = PREFIX + name
    build.__qualname__ = build.__name__
    build.__module__ = __name__
    build.__doc__ = f"convinit's `{name}` preset (see convinit.create_model)."
    return build


def exported_model(name: str, overlay: dict[str, Any], num_classes: int | None) -> nn.Module:
    """`pretrained=True`: the model `convinit export` wrote to `pretrained_cfg_overlay=dict(file=...)`
    (the folder, or its model.safetensors)."""
    from pathlib import Path

    from convinit.models.pretrained import from_pretrained

    file = overlay.get("file")
    if not file:
        raise ValueError(
            f"{PREFIX}{name} has no published weights: pass pretrained_cfg_overlay=dict(file=FOLDER) with a "
            "folder from `convinit export` (or use convinit.from_pretrained)"
        )
    folder = Path(file).parent if Path(file).is_file() else Path(file)
    model = from_pretrained(folder)
    saved = model.model_kwargs["num_classes"]
    if model.model_name != name or num_classes not in (None, saved):
        raise ValueError(
            f"{folder} holds a {saved}-class {model.model_name}, "
            f"not {PREFIX}{name} with {num_classes} classes"
        )
    return model


def register_with_timm() -> list[str]:
    """Register every convinit model with timm (idempotent); returns the timm names."""
    from timm.models import _registry

    from convinit.models.registry import list_models

    names = []
    for name in list_models():
        timm_name = PREFIX + name
        if timm_name not in _registry._model_entrypoints:
            _registry.register_model(timm_entrypoint(name))
        names.append(timm_name)
    return names


class _RegisterAfterTimmImport(importlib.abc.MetaPathFinder):
    """Wraps the loading of the top-level `timm` module so convinit registers right after it runs."""

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname != "timm":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us again
        spec = importlib.util.find_spec("timm")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            register_with_timm()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Register now if timm is loaded, else as soon as it is (nothing happens if timm is not installed)."""
    if "timm" in sys.modules:
        register_with_timm()
    elif importlib.util.find_spec("timm") is not None and not any(
        isinstance(f, _RegisterAfterTimmImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _RegisterAfterTimmImport())


__all__ = ["install", "register_with_timm", "timm_entrypoint"]
