"""Model registry and architectures, imported on first use (`import convinit` needs no torch).

`create_model`, `list_models` and `register_model` see every shipped preset: the presets are a table
(`presets.py`, no torch), and the registry imports the architecture modules (vit, convit, convmixer,
deit) the first time a model is built.
"""

from __future__ import annotations

from convinit.naming.lazy_exports import lazy_exports

_EXPORTS = {
    "create_model": "convinit.models.registry",
    "list_models": "convinit.models.registry",
    "register_model": "convinit.models.registry",
    "record_attention": "convinit.models.layers",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
