"""Weight initialisation schemes, kept apart from the models.

`initialize(model, scheme, **options)` applies a registered scheme in place and returns its report
(a JSON-serialisable dict: at least `scheme` and `seconds`). Scheme modules register themselves with
`register_scheme`; `random` (the model's own default init) is always there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch.nn as nn

from convinit.errors import ConfigError

Scheme = Callable[..., dict[str, Any]]
_SCHEMES: dict[str, Scheme] = {}


def register_scheme(name: str) -> Callable[[Scheme], Scheme]:
    def decorate(fn: Scheme) -> Scheme:
        _SCHEMES[name] = fn
        return fn

    return decorate


def list_schemes() -> list[str]:
    return sorted(_SCHEMES)


def initialize(model: nn.Module, scheme: str = "random", **options: Any) -> dict[str, Any]:
    """Initialise `model` in place with `scheme`; returns the scheme's report plus the seconds taken."""
    if scheme not in _SCHEMES:
        raise ConfigError(f"unknown init scheme {scheme!r}; choose one of: {', '.join(list_schemes())}")
    start = time.perf_counter()
    report = dict(_SCHEMES[scheme](model, **options))
    report["scheme"] = scheme
    report["seconds"] = time.perf_counter() - start
    return report


@register_scheme("random")
def random_init(model: nn.Module) -> dict[str, Any]:
    """The model's own default initialisation: nothing to do."""
    return {}


__all__ = ["initialize", "list_schemes", "register_scheme"]


from convinit.init import impulse, mimetic  # noqa: E402,F401  (register the impulse and mimetic schemes)
