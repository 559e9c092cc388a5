"""Names a package exports, imported from their modules on first use.

`import convinit` (and so `convinit --help`, `models`, `configs`, `datasets`) must not import torch:
the packages list what they export and where it lives, and Python's module `__getattr__` (PEP 562)
imports that module the first time a name is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `exports[name]` (a module path) on first use;
    a submodule (`convinit.data` after `import convinit`) is imported when first asked for, as an eager
    package import made it available."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
