"""The table of model presets (`presets.yaml` beside this file): a row per name, like timm's model cfgs.

A row names the family that builds the model (the module of `convinit.models` that registers its
builder: `convit`, `deit`, `vit`, `convmixer`), the builder's arguments that make the preset, and one
line on what it is. The arguments are the preset's defaults: a caller may change each of them (and the
family's other options, which keep the builder's defaults) by keyword, but not the `fixed` ones. So
adding a ViT preset is adding one row to the table; a new family is a new module that registers its
builder (see `convinit.models.registry`).

The table is data, read without torch, so that `convinit models` lists the names at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).with_name("presets.yaml")


@dataclass(frozen=True)
class Preset:
    """One named model: `family`'s builder called with `args` (the caller's keywords over them), `fixed`."""

    family: str
    args: dict[str, Any]
    description: str
    fixed: dict[str, Any] = field(default_factory=dict)  # set by the preset, not by its caller


def read_presets(path: Path = TABLE) -> dict[str, Preset]:
    """The rows of a preset table, by name; a row with a key other than Preset's fields is a TypeError."""
    rows = yaml.safe_load(path.read_text(encoding="utf-8"))["presets"]
    return {name: Preset(**row) for name, row in rows.items()}


PRESETS: dict[str, Preset] = read_presets()
