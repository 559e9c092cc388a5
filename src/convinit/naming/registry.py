"""One registration rule for everything convinit finds by name: models, datasets, init schemes, trackers.

An entry is registered by the file that defines it (`@REGISTRY.register("name")`, or
`REGISTRY.add("name", entry)`); each registry owns a package and imports every module in it the first
time it is asked for a name (`convinit.data.readers`, `convinit.init.schemes`, ...). So adding a
dataset, an init scheme or a tracker is adding one file to its package, and nothing else names it.
Unknown names fail with one `ConfigError` line that suggests the closest registered names.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from convinit.errors import ConfigError
from convinit.naming.did_you_mean import suggestion

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind, registered by the modules of `package` (imported on first lookup)."""

    def __init__(
        self,
        kind: str,
        package: str | None = None,
        listing: str = "",
        unknown: Callable[[str, list[str]], str] | None = None,
    ) -> None:
        self.kind = kind  # what an entry is called in messages: "model", "dataset", "init scheme"
        self.package = package
        self.listing = listing  # where a user finds the names, e.g. "; `convinit models` lists them"
        self.unknown = unknown  # (typed, names) -> the refusal's text, where a registry words it its own way
        self._entries: dict[str, T] = {}
        self._discovered = package is None

    def add(self, name: str, entry: T) -> T:
        """Register `entry` under `name`; a name registered twice is a programming error."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""

        def decorate(entry: T) -> T:
            return self.add(name, entry)

        return decorate

    def discover(self) -> None:
        """Import every public module of the registry's package, once: each registers its entries."""
        if self._discovered:
            return
        self._discovered = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{self.package}.{module.name}")

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """The entry registered as `name`, or a one-line `ConfigError` suggesting the closest names."""
        self.discover()
        if name not in self._entries:
            if self.unknown is not None:
                raise ConfigError(self.unknown(name, self.names()))
            hint = suggestion(name, self._entries, self.listing)
            raise ConfigError(f"unknown {self.kind} {name!r}{hint}")
        return self._entries[name]
