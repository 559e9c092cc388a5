"""The registry of init schemes: scheme modules register here, `convinit.init.initialize` looks up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Scheme = Callable[..., dict[str, Any]]
SCHEMES: dict[str, Scheme] = {}


def register_scheme(name: str) -> Callable[[Scheme], Scheme]:
    def decorate(fn: Scheme) -> Scheme:
        SCHEMES[name] = fn
        return fn

    return decorate


def list_schemes() -> list[str]:
    return sorted(SCHEMES)
