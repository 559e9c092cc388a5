"""Experiment presets as grids: rows (methods or settings) x seeds, at a small or full scale.

An experiment is a YAML file in `convinit/configs/experiments/`:

    description: Table 1 of paper 1 ...
    scales:
      small: {preset: paper1/vit_small, overrides: {model_args.qk_input: x}}   # CPU, minutes
      full: {preset: paper1/table1_models}                                      # the paper's settings, GPU
    seeds: [0, 1, 2]
    rows:
      - {label: Model I, overrides: {model_args.qk_input: blend, model_args.alpha: 0.5}, paper: 71.3}

A small scale names a CPU profile (convit/small, paper1/vit_small, paper1/convmixer_small: a recipe and
a model that run in minutes on a CPU; or one built on it that users run alone, paper1/table3_alpha_small)
and, as its overrides, the experiment's own settings as its full preset states them, so no preset is a
shrunk copy of another. A scale may carry its own `rows` and `seeds` (e.g. other data fractions on the
CPU). Extra keys of a row (alpha, group, fraction) are kept in the run's experiment.json for the
report's plots.

`expand()` turns it into one `GridCell` per (row, seed), each with its validated TrainConfig and a
stable run directory name, so a grid can be resumed by re-running it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from convinit.config import TrainConfig, merge, parse_overrides, read_yaml, resolve_config
from convinit.errors import ConfigError
from convinit.naming.did_you_mean import suggestion

SCALES = ("small", "full")


@dataclass
class GridCell:
    """One run of a grid: its row label, seed, resolved config and directory name."""

    experiment: str
    label: str
    seed: int
    config: TrainConfig
    preset: str
    paper: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    row: int = 0  # position of the row in the experiment, which orders report tables

    @property
    def dirname(self) -> str:
        return f"{slug(self.label)}/seed{self.seed}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def experiments_dir() -> Path:
    return Path(str(resources.files("convinit") / "configs" / "experiments"))


def list_experiments() -> list[str]:
    return sorted(p.stem for p in experiments_dir().glob("*.yaml"))


def load_experiment(name: str) -> dict[str, Any]:
    path = Path(name)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        path = experiments_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown experiment {name!r}; choose one of: {', '.join(list_experiments())}")
    spec = read_yaml(path) or {}
    if not isinstance(spec, dict):
        raise ConfigError(f"experiment {path} must be a mapping with scales: and rows: sections")
    for key in ("scales", "rows"):
        if key not in spec:
            raise ConfigError(f"experiment {name!r} ({path}) has no {key!r} section")
    check_shape(spec, path)
    spec.setdefault("name", path.stem)
    return spec


def check_rows(rows: Any, where: str) -> None:
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{where}: rows must be a non-empty list of {{label: ..., overrides: {{...}}}}")
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("label"), str):
            raise ConfigError(f"{where}: row {index + 1} ({row!r}) must be a mapping with a label: string")
        if not isinstance(row.get("overrides", {}), dict):
            raise ConfigError(f"{where}: row {row['label']!r} has overrides that are not a mapping")
        if not isinstance(row.get("preset", ""), str):
            raise ConfigError(f"{where}: row {row['label']!r} has a preset that is not a name")


def check_shape(spec: dict[str, Any], path: Path) -> None:
    """One-line ConfigError for an experiment file of the wrong shape (`rows: [1, 2]`)."""
    check_rows(spec["rows"], str(path))
    if not isinstance(spec["scales"], dict) or not spec["scales"]:
        raise ConfigError(f"{path}: scales must map small/full to {{preset: ..., overrides: {{...}}}}")
    for scale, base in spec["scales"].items():
        if not isinstance(base, dict) or not isinstance(base.get("preset"), str):
            raise ConfigError(f"{path}: scale {scale!r} must be a mapping with a preset: name")
        if not isinstance(base.get("overrides", {}), dict):
            raise ConfigError(f"{path}: scale {scale!r} has overrides that are not a mapping")
        if "rows" in base:
            check_rows(base["rows"], f"{path}, scale {scale!r}")
        seeds = base.get("seeds", spec.get("seeds", [0]))
        if not isinstance(seeds, list) or not all(type(s) is int and s >= 0 for s in seeds):
            raise ConfigError(f"{path}: seeds must be a list of non-negative integers, got {seeds!r}")


def flatten(overrides: dict[str, Any]) -> dict[str, Any]:
    """{'model_args.alpha': 0.1} -> {'model_args': {'alpha': 0.1}} (YAML rows use dotted keys)."""
    as_strings = [
        f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
        for k, v in overrides.items()
    ]
    return parse_overrides(as_strings)


def expand(
    name: str,
    scale: str = "small",
    seeds: list[int] | None = None,
    extra_overrides: dict[str, Any] | None = None,
) -> list[GridCell]:
    """Every (row, seed) run of experiment `name` at `scale`, configs validated up front."""
    spec = load_experiment(name)
    if scale not in spec["scales"]:
        raise ConfigError(f"experiment {name!r} has no scale {scale!r}; it has: {', '.join(spec['scales'])}")
    base = spec["scales"][scale]
    seeds = seeds if seeds is not None else list(base.get("seeds", spec.get("seeds", [0])))
    runs = []
    for index, row in enumerate(base.get("rows", spec["rows"])):  # a scale may bring its own rows
        overrides = merge(flatten(base.get("overrides", {})), flatten(row.get("overrides", {})))
        overrides = merge(overrides, extra_overrides or {})
        preset = row.get("preset", base["preset"])  # a row may bring its own model (a CNN beside ViTs)
        for seed in seeds:
            cfg = resolve_config(preset, merge(overrides, {"seed": seed}))
            runs.append(
                GridCell(
                    spec["name"],
                    row["label"],
                    seed,
                    cfg,
                    preset,
                    row.get("paper"),
                    {k: v for k, v in row.items() if k not in ("label", "overrides", "paper", "preset")},
                    index,
                )
            )
    return runs


def select_rows(runs: list[GridCell], rows: list[str] | None) -> list[GridCell]:
    """The runs of the rows named by label or by folder name (`slug`: what results/ shows), every run
    when none is named; an unknown name is refused in one line listing the grid's rows."""
    if not rows:
        return runs
    labels = list(dict.fromkeys(spec.label for spec in runs))
    chosen = set()
    for name in rows:
        found = [label for label in labels if name in (label, slug(label))]
        if not found:
            listing = "; its rows: " + ", ".join(repr(label) for label in labels)
            raise ConfigError(f"--row {name!r} is not a row of this grid{suggestion(name, labels, listing)}")
        chosen.update(found)
    return [spec for spec in runs if spec.label in chosen]
