"""The registry of init schemes: every module of `convinit.init.schemes` registers its scheme here.

The registry imports that package's modules the first time it is asked for a name, so a new scheme is
one new file in `init/schemes/` and nothing else names it; `convinit.init.initialize` looks it up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convinit.naming.registry import Registry

Scheme = Callable[..., dict[str, Any]]  # (model, **options) -> report


def unknown_scheme(typed: str, names: list[str]) -> str:
    """The refusal of a scheme name: every scheme, since there are few."""
    return f"unknown init scheme {typed!r}; choose one of: {', '.join(names)}"


SCHEMES: Registry[Scheme] = Registry("init scheme", "convinit.init.schemes", unknown=unknown_scheme)


def register_scheme(name: str) -> Callable[[Scheme], Scheme]:
    """Decorator: register `fn(model, **options) -> report` as init scheme `name`."""
    return SCHEMES.register(name)


def list_schemes() -> list[str]:
    return SCHEMES.names()
