"""A module dropped into a registry's package for one test: proves that adding a file is all it takes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from convinit.naming.registry import Registry


@contextmanager
def dropped_module(registry: Registry, folder: Path, source: str, name: str = "dropped_in") -> Iterator[None]:
    """`registry` as if its package held one more file, `name`.py with `source`: the file is written to
    `folder`, which joins the package's search path, and the registry discovers its package again. The
    shipped modules are imported already, so only the new one registers; on exit the package, the
    registry and `sys.modules` are as they were."""
    package = importlib.import_module(registry.package)
    registry.discover()  # the shipped entries first, so that the saved copy holds them
    saved_path, saved_entries = package.__path__, dict(registry._entries)
    (folder / f"{name}.py").write_text(source)
    package.__path__ = [*saved_path, str(folder)]
    importlib.invalidate_caches()
    registry._discovered = False
    try:
        yield
    finally:
        package.__path__ = saved_path
        registry._entries = saved_entries
        registry._discovered = True
        sys.modules.pop(f"{registry.package}.{name}", None)
