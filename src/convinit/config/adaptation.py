"""Defaults never refuse each other: what a preset chose adapts to what the user changed.

A preset's values are chosen together (20 epochs with 1 warm-up epoch; lr 5e-4 decaying to 1e-5).
When an override changes one of them and a preset value no longer fits it, the preset value adapts,
keeping its meaning (the same fraction of the run, the same ratio to lr) and one line says so. Only
values the user wrote are refused, and the refusal names where the other value came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convinit.errors import ConfigError

Values = dict[str, Any]


def adapt_preset_defaults(
    values: Values, preset_values: Values, user_keys: set[str], preset: str, say: Callable[[str], None]
) -> Values:
    """`values` (preset <- overrides, every key present) with the preset's colliding values adapted.

    `preset_values`: the same keys as the preset alone set them; `user_keys`: the keys overridden.
    """
    values = dict(values)
    for rule in (adapt_warmup, adapt_min_lr, adapt_subset, adapt_randaugment):
        for message in rule(values, preset_values, user_keys, preset):
            say(message)
    return values


def origin(key: str, values: Values, user_keys: set[str], preset: str) -> str:
    """'epochs (3, set by you)' or "epochs (30, from preset 'convit/small')": where a value came from."""
    where = "set by you" if key in user_keys else f"from preset {preset!r}"
    return f"{key} ({values[key]}, {where})"


def scale_with(
    key: str, anchor: str, values: Values, preset_values: Values, user_keys: set[str], preset: str
) -> str:
    """Scale the preset's `key` by how the user changed `anchor`, keeping its ratio; the note.

    Refused (naming both values and where each came from) when the user wrote `key` themselves or the
    preset's own pair already collides.
    """
    value, preset_anchor = values[key], preset_values[anchor]
    if key in user_keys or not value < preset_anchor:
        relation = "shorter than" if key == "warmup_epochs" else "below"
        mine, other = origin(key, values, user_keys, preset), origin(anchor, values, user_keys, preset)
        raise ConfigError(f"{mine} must be {relation} {other}; lower {key} or raise {anchor}")
    scaled = float(f"{value * values[anchor] / preset_anchor:.3g}")
    values[key] = scaled
    return (
        f"{key} {value:g} of preset {preset!r} (set for its {anchor}={preset_anchor:g}) scaled to {scaled:g} "
        f"for {anchor}={values[anchor]:g}; set {key}= to choose"
    )


def adapt_warmup(values: Values, preset_values: Values, user_keys: set[str], preset: str) -> list[str]:
    """A warm-up as long as the run: the preset's, scaled to the same fraction of the shortened run."""
    if not 0 < values["warmup_epochs"] >= values["epochs"]:
        return []
    return [scale_with("warmup_epochs", "epochs", values, preset_values, user_keys, preset)]


def adapt_min_lr(values: Values, preset_values: Values, user_keys: set[str], preset: str) -> list[str]:
    """A final lr at or above a lowered lr: the preset's min_lr, at the same ratio to lr."""
    if values["min_lr"] < values["lr"] or values["lr"] <= 0:
        return []
    return [scale_with("min_lr", "lr", values, preset_values, user_keys, preset)]


def adapt_subset(values: Values, preset_values: Values, user_keys: set[str], preset: str) -> list[str]:
    """train_fraction and per_class both pick the training subset: the one the user set wins."""
    if values["train_fraction"] is None or values["per_class"] is None:
        return []
    mine = [k for k in ("train_fraction", "per_class") if k in user_keys]
    if len(mine) != 1:
        raise ConfigError("set train_fraction or per_class, not both")
    other = "per_class" if mine[0] == "train_fraction" else "train_fraction"
    dropped, values[other] = values[other], None
    return [
        f"{other} {dropped:g} of preset {preset!r} dropped: {mine[0]}={values[mine[0]]:g} picks the subset"
    ]


def adapt_randaugment(values: Values, preset_values: Values, user_keys: set[str], preset: str) -> list[str]:
    """Another RandAugment policy reads m on its own scale (timm 0-10, torchvision bins 0-30)."""
    policy = values["randaugment_policy"]
    if not values["randaugment_n"] or "randaugment_policy" not in user_keys:
        return []
    if policy == preset_values["randaugment_policy"]:
        return []
    notes = []
    if "randaugment_m" not in user_keys:
        m = values["randaugment_m"]
        values["randaugment_m"] = float(round(m * 3)) if policy == "torchvision" else min(10.0, m / 3)
        notes.append(
            f"randaugment_m {m:g} of preset {preset!r} read on {policy}'s scale: "
            f"{values['randaugment_m']:g}; set randaugment_m= to choose"
        )
    if policy == "torchvision" and values["randaugment_mstd"] and "randaugment_mstd" not in user_keys:
        notes.append(
            f"randaugment_mstd {values['randaugment_mstd']:g} of preset {preset!r} dropped: "
            "torchvision's RandAugment has no magnitude noise"
        )
        values["randaugment_mstd"] = 0.0
    return notes
