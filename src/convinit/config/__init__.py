"""The training configuration: its schema and checks (`train_config`), and the rules that adapt a
preset's values to what the user changed (`adaptation`), and the recipe a user's own ViT gets unless
they chose one (`recommendation`). The public names are re-exported here."""

from convinit.config.train_config import (
    CHOICES,
    KEYS,
    TrainConfig,
    base_type,
    build_config,
    config_differences,
    drop_notes,
    load_config,
    merge,
    parse_overrides,
    preset_names,
    read_yaml,
    resolve_config,
    save_config,
    say_notes,
    say_once,
    unsay,
)

__all__ = [
    "CHOICES",
    "KEYS",
    "TrainConfig",
    "base_type",
    "build_config",
    "config_differences",
    "drop_notes",
    "load_config",
    "merge",
    "parse_overrides",
    "preset_names",
    "read_yaml",
    "resolve_config",
    "save_config",
    "say_notes",
    "say_once",
    "unsay",
]
