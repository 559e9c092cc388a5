"""Model registry and architectures, imported on first use (`import convinit` needs no torch).

`create_model`, `list_models` and `register_model` see every shipped preset: the registry imports the
architecture modules (vit, convit, convmixer, deit) the first time it is asked.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_model": "convinit.models.registry",
    "list_models": "convinit.models.registry",
    "register_model": "convinit.models.registry",
    "record_attention": "convinit.models.layers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'convinit.models' has no attribute {name!r}")
