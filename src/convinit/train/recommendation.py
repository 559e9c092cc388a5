"""What convinit recommends for a user's own ViT, and whether a model can take it.

The recipe (`convinit.config.recommendation.RECOMMENDED`) is the row docs/results.md finds best for a
timm ViT trained from scratch on 1,000 images: paper 1's Q/K blend with content projection
(docs/method.md §8, §9) and impulse init (docs/method.md §3) with the learned table kept. A run gets it
by default (`recommended=auto`); `convinit.recommend(model)` names it for a model of one's own.

A model that cannot take it (another architecture, RoPE, a patch grid that is not fixed, a width the
blend's sin-cos table cannot split, a grid too small for even a 3x3 kernel) is named by the one line
`convert` or impulse would refuse it with, found before any weight is drawn (`recipe_refusal`). On a grid
that impulse's 5x5 kernel does not fit but a 3x3 one does (a 2x2 grid), the recipe adapts its kernel
(`recipe_kernel`: init_args.kernel_size=3) instead of declining, and says so in one line.

Beside the recipe, `recommend` says what the grid heads-validation found of the number of heads, with
the model's own count (`heads_advice`): advice only, since the head count is the user's architecture.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from convinit.config.recommendation import EXTERNAL, RECOMMENDED, WHAT, as_overrides
from convinit.errors import ConfigError
from convinit.init.schemes.impulse import ImpulseOptions
from convinit.models.convert import Conversion, conversion_of, convert, host_layers, parts_of
from convinit.models.filters import Grid, check_kernel_fits

# The grid's figures (users-vit-end: timm's ViT, width 64, depth 4, 7x7 grid, 1,000 Fashion-MNIST images,
# 100 epochs, 5 seeds; users-vit-end-30: 30 images per class; vit-vs-cnn: the same ViT and the CNN with
# crop+flip to convergence, 300 epochs). Written by
# `python tests/docs/test_doc_numbers.py`; tests/docs/test_doc_numbers.py holds them to the kept runs.
EVIDENCE = (
    "78.03 +- 0.52 % against 75.86 +- 0.44 % with impulse init alone (+2.17 [+1.95, +2.38]) and "
    "73.56 +- 1.62 % at random on timm's ViT, 1,000 Fashion-MNIST images, 100 epochs, 5 seeds; "
    "at 30 images per class 72.71 +- 0.28 % against a CNN's 72.18 +- 1.03 %; "
    "with crop+flip to convergence (300 epochs) the CNN of the same budget stays ahead: "
    "80.16 +- 0.76 % against 82.50 +- 0.45 % at 1,000 images (-2.34 [-3.25, -1.43]), "
    "72.53 +- 1.79 % against 75.17 +- 0.54 % at 300 (-2.63 [-4.63, -0.64])"
)
SOURCE = "docs/results.md, grids users-vit-end, users-vit-end-30 and vit-vs-cnn"
# The head count (grid heads-validation, chosen on held-out training images, never the test set); written
# and held to the kept runs as EVIDENCE is.
HEADS_EVIDENCE = (
    "on held-out images more, smaller heads did not help beyond noise: with the recipe 80.33 +- 1.16 % at"
    " 4 heads of dim 16, 80.17 +- 1.17 % at 8 (-0.17 [-0.31, -0.02]) and 80.87 +- 1.89 % at 16 (+0.53 "
    "[-1.54, +2.60] within noise); at random init 78.10 +- 1.66 %, 78.47 +- 0.93 % and 77.60 +- 0.96 % "
    "(timm's ViT of width 64, depth 4, 1,000 Fashion-MNIST images, crop+flip, 300 epochs, 100 held-out "
    "images per class, 3 seeds)"
)
HEADS_SOURCE = "docs/results.md, grid heads-validation"
SMALL_GRID_KERNEL = 3  # the recipe's impulse kernel where its 5x5 one does not fit the token grid


@dataclass(frozen=True)
class Recommendation:
    """The keys convinit recommends for a model (`overrides`, as `convinit train` takes them; empty when
    none applies) and why, in one line (`reason`); for a ViT that takes them, what the evidence says of its
    number of heads (`heads`: advice only, as no key changes a user's architecture)."""

    overrides: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    heads: str = ""  # advice on the number of heads, with figures; never applied (the model is the user's)

    @property
    def command_line(self) -> str:
        """'convert=blend convert_args.content_projection=true ...': the keys to add to `convinit train`."""
        return " ".join(as_overrides(self.overrides))

    def __str__(self) -> str:
        text = f"{self.command_line}: {self.reason}" if self.overrides else self.reason
        return f"{text}\nheads: {self.heads}" if self.heads else text


def recommend(model: nn.Module | str) -> Recommendation:
    """The recipe convinit recommends for `model` trained from scratch: a timm or transformers ViT
    (an `nn.Module`, or a `model=` name such as `timm:vit_tiny_patch16_224` or `hf:vit`), with the
    results page's figures as the reason; for a model that cannot take it, no keys and the reason.

    A module is checked on a copy (the model given is not changed). In Python, the same recipe is
    `convinit.convert(model, "blend", content_projection=True)` then
    `convinit.initialize(model, "impulse", images=batch, learned_pos_embed="keep")`.
    """
    if isinstance(model, str):
        if not model.startswith(EXTERNAL):
            return Recommendation(
                reason=f"{model} is convinit's own model: its preset carries its method; the recipe is for "
                "a timm or transformers ViT (timm:NAME, hf:vit)"
            )
        found = None
    elif isinstance(model, nn.Module):
        conversion = conversion_of(RECOMMENDED["convert"], RECOMMENDED["convert_args"])
        found = recipe_refusal(copy_to_check(model), conversion)
    else:
        raise ConfigError(f"recommend takes a torch.nn.Module or a model name, got {type(model).__name__}")
    if found is not None:
        return Recommendation(reason=f"the recommended recipe ({WHAT}) does not apply: {found}")
    reason = f"{WHAT}, the best ViT row of {SOURCE}: {EVIDENCE}"
    heads = heads_advice(model)
    kernel = recipe_kernel(model) if isinstance(model, nn.Module) else None
    if kernel is None:
        return Recommendation(dict(RECOMMENDED), reason, heads)
    init_args = {**RECOMMENDED["init_args"], "kernel_size": kernel}
    return Recommendation({**RECOMMENDED, "init_args": init_args}, f"{kernel_note(kernel)}; {reason}", heads)


def heads_advice(model: nn.Module | str) -> str:
    """What the evidence says of the number of heads for a ViT trained from scratch, with this model's own
    count where it is a module (read from its first attention layer, the model unchanged)."""
    advice = f"{HEADS_EVIDENCE} ({HEADS_SOURCE})"
    if not isinstance(model, nn.Module):
        return advice
    layout, layers, _, _ = host_layers(model)
    parts = parts_of(layout, *layers[0])
    return f"this model has {parts['heads']} heads of dim {parts['dim_head']}; {advice}"


def copy_to_check(model: nn.Module) -> nn.Module:
    """A copy of `model` to convert and throw away (the model given is never changed); one ConfigError
    when it cannot be copied (a module holding a lock, a file or a generator)."""
    try:
        return copy.deepcopy(model)
    except Exception as exc:
        detail = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise ConfigError(
            f"recommend checks a copy of the model, and this {type(model).__name__} cannot be copied "
            f"({detail}); pass its model= name (e.g. 'timm:vit_tiny_patch16_224') or a copyable module"
        ) from exc


def recipe_refusal(
    model: nn.Module, conversion: Conversion | None, kernel_size: int | None = None
) -> str | None:
    """Why `model` cannot take `conversion` and impulse init (the one line `convert` or impulse gives), or
    None. The model is converted in place: pass one to throw away (a meta construction, a copy)."""
    try:
        grid = host_layers(model)[2]
        if conversion is not None:
            convert(model, **conversion.to_dict())
        size = kernel_size or kernel_for(grid) or ImpulseOptions.kernel_size
        check_kernel_fits(size, grid, "impulse kernel_size")
    except ConfigError as exc:
        return str(exc)
    return None


def kernel_for(grid: Grid) -> int | None:
    """SMALL_GRID_KERNEL where impulse's default kernel does not fit `grid` and it does (a 2x2 grid:
    a 5x5 kernel's outer taps point outside it from every token), else None (the default, or no kernel
    fits and impulse's refusal names the default)."""

    def fits(size: int) -> bool:
        try:
            check_kernel_fits(size, grid)
        except ConfigError:
            return False
        return True

    return SMALL_GRID_KERNEL if fits(SMALL_GRID_KERNEL) and not fits(ImpulseOptions.kernel_size) else None


def recipe_kernel(model: nn.Module) -> int | None:
    """The impulse kernel the recipe adapts to `model`'s token grid (`kernel_for`), or None: the default,
    or a model `recipe_refusal` names. Read before any conversion; the model is not changed."""
    try:
        return kernel_for(host_layers(model)[2])
    except ConfigError:
        return None


def kernel_note(kernel_size: int) -> str:
    """The one line on a recipe whose kernel adapted to a small grid."""
    default = ImpulseOptions.kernel_size
    return (
        f"impulse init with a {kernel_size}x{kernel_size} kernel (init_args.kernel_size={kernel_size}): "
        f"its {default}x{default} kernel does not fit this model's token grid"
    )
