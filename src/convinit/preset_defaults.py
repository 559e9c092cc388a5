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


def adapt_warmup(values: Values, preset_values: Values, user_keys: set[str], preset: str) -> list[str]:
    """A warm-up as long as the run: scale the preset's to the same fraction of the shortened run."""
    warmup, epochs = values["warmup_epochs"], values["epochs"]
    if not 0 < warmup >= epochs:
        return []
    preset_epochs = preset_values["epochs"]
    if "warmup_epochs" in user_keys or warmup >= preset_epochs:
        raise ConfigError(
            f"{origin('warmup_epochs', values, user_keys, preset)} must be shorter than "
            f"{origin('epochs', values, user_keys, preset)}; lower warmup_epochs or raise epochs"
        )
    scaled = float(f"{warmup * epochs / preset_epochs:.3g}")
    values["warmup_epochs"] = scaled
    return [
        f"warm-up of preset {preset!r} ({warmup:g} of its {preset_epochs} epochs) scaled to {scaled:g} "
        f"epochs for epochs={epochs}; set warmup_epochs= to choose"
    ]


def adapt_min_lr(values: Values, preset_values: Values, user_keys: set[str], preset: str) -> list[str]:
    """A final lr at or above a lowered lr: keep the preset's ratio of min_lr to lr."""
    min_lr, lr = values["min_lr"], values["lr"]
    if min_lr < lr or lr <= 0:
        return []
    preset_lr = preset_values["lr"]
    if "min_lr" in user_keys or not min_lr < preset_lr:
        raise ConfigError(
            f"{origin('min_lr', values, user_keys, preset)} must be below "
            f"{origin('lr', values, user_keys, preset)}: the schedule decays from lr to it"
        )
    scaled = float(f"{min_lr * lr / preset_lr:.3g}")
    values["min_lr"] = scaled
    return [
        f"min_lr of preset {preset!r} ({min_lr:g}, 1/{preset_lr / min_lr:g} of its lr {preset_lr:g}) "
        f"scaled to {scaled:g} for lr={lr:g}; set min_lr= to choose"
    ]


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
