"""The recommended recipe for a user's own ViT trained from scratch, applied unless the user chose.

docs/results.md's users'-ViT grid (`users-vit-end`: timm's ViT at width 64, depth 4, on 1,000
Fashion-MNIST images, 5 seeds, trained to the end) finds one ViT row best: paper 1's Q/K blend with its
content projection (docs/method.md §8) and impulse init with the learned table kept. A run of a timm or
transformers ViT (`model=timm:NAME`, `model=hf:vit`) whose convert and init nobody chose (neither the
user nor a preset named with --config) gets those keys, says so in one line with the key that turns it
off (`recommended=none`), and records `recommended: applied` beside them in its saved config, so resume,
eval and export rebuild the same model. Where the model cannot take them, the plan trains it as it is
and says why (`convinit.train.recommendation`).

Here: which keys the recipe sets and when a config gets them; the config layer does not build models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Values = dict[str, Any]

# the results page's best ViT row (users-vit-end: "blend conversion + impulse + content projection"),
# as the keys it sets; tests/config/test_recommended_key.py holds this to the grid's row
RECOMMENDED: Values = {
    "convert": "blend",
    "convert_args": {"content_projection": True},
    "init": "impulse",
    "init_args": {"learned_pos_embed": "keep"},
}
WHAT = "paper 1's blend with content projection and impulse init"
OFF = "recommended=none"
CHOSEN_BY = ("convert", "convert_args", "init", "init_args")  # a run whose method someone chose
EXTERNAL = ("timm:", "hf:")  # a user's own ViT: convinit's presets carry their method in their preset
# model_args that would load weights: refused by the model's argument check, and never converted unasked
WEIGHTS = ("pretrained", "checkpoint_path")


def as_overrides(values: Values = RECOMMENDED) -> list[str]:
    """['convert=blend', 'convert_args.content_projection=true', ...]: the recipe as command-line keys."""
    items = []
    for key, value in values.items():
        pairs = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, entry in pairs:
            text = str(entry).lower() if isinstance(entry, bool) else str(entry)
            items.append(f"{key}.{sub}={text}" if sub else f"{key}={text}")
    return items


def loads_weights(model_args: Any) -> bool:
    """Whether `model_args` ask for pretrained weights (then nothing is converted unasked)."""
    return isinstance(model_args, dict) and any(model_args.get(key) for key in WEIGHTS)


def wants_recommendation(values: Values, chosen: set[str]) -> bool:
    """Whether the run gets the recipe: recommended=auto, a timm / transformers model trained from
    scratch, and none of convert, convert_args, init, init_args in `chosen` (the keys the user or a
    named preset set)."""
    model = values.get("model")
    return (
        values.get("recommended", "auto") == "auto"
        and isinstance(model, str)
        and model.startswith(EXTERNAL)
        and not loads_weights(values.get("model_args"))
        and not set(CHOSEN_BY) & chosen
    )


def apply_recommendation(values: Values, chosen: set[str], say: Callable[[str], None]) -> Values:
    """`values` with the recipe's keys and `recommended: applied` where the run wants it (one line said)."""
    if not wants_recommendation(values, chosen):
        return values
    say(applied_note(values["model"]))
    return {**values, **RECOMMENDED, "recommended": "applied"}


def applied_note(model: str) -> str:
    return (
        f"model {model} trains from scratch with the recommended recipe, the one docs/results.md finds best "
        f"for a user's ViT ({WHAT}): {' '.join(as_overrides())}; {OFF} trains it as it is"
    )


def not_applied_note(model: str, reason: str) -> str:
    return (
        f"model {model}: the recommended recipe ({WHAT}) was not applied: {reason}; "
        "it trains as it is, at random init"
    )
