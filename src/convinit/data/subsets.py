"""Stratified, seeded training subsets for data-efficiency studies.

`fraction` keeps floor(f * n_c) images of each class c (at least one); `per_class` keeps exactly n.
`order="random"` draws them with a seeded permutation; `order="first"` keeps the first ones in file
order, which is ConViT's protocol for its ImageNet subsets (docs/method.md §5).
"""

from __future__ import annotations

import math
import numbers

import torch

from convinit.errors import ConfigError


def is_number(value, kind: type) -> bool:
    """`value` is a `kind` number (numpy scalars included) and not a bool."""
    return isinstance(value, kind) and not isinstance(value, bool)


def stratified_subset(
    labels: torch.Tensor,
    fraction: float | None = None,
    per_class: int | None = None,
    seed: int = 0,
    order: str = "random",
) -> torch.Tensor:
    """Sorted indices of the kept training images (all of them when neither `fraction` nor `per_class`)."""
    if fraction is not None and per_class is not None:
        raise ConfigError(f"set train_fraction ({fraction}) or per_class ({per_class}), not both")
    if fraction is not None and not (is_number(fraction, numbers.Real) and 0.0 < fraction <= 1.0):
        raise ConfigError(f"train_fraction must be a number in (0, 1], got {fraction!r}")
    if per_class is not None and not (is_number(per_class, numbers.Integral) and per_class >= 1):
        raise ConfigError(f"per_class must be a positive integer, got {per_class!r}")
    if order not in ("random", "first"):
        raise ConfigError(f"subset_order must be 'random' or 'first', got {order!r}")
    if fraction is None and per_class is None:
        return torch.arange(len(labels))
    generator = torch.Generator().manual_seed(seed)
    kept = []
    for label in labels.unique(sorted=True).tolist():
        members = (labels == label).nonzero().flatten()
        if order == "random":
            members = members[torch.randperm(len(members), generator=generator)]
        if per_class is not None:
            if per_class > len(members):
                raise ConfigError(
                    f"per_class={per_class} but class {label} has only {len(members)} training images; "
                    f"lower per_class"
                )
            count = per_class
        else:
            count = max(1, math.floor(fraction * len(members)))
        kept.append(members[:count])
    return torch.cat(kept).sort().values


# the validation draw's own stream: the same run seed draws its training subset and its held-out images
# from different permutations, so a validation run trains on exactly the images its test twin trains on
HOLDOUT_STREAM = 7919


def holdout_split(
    labels: torch.Tensor, keep: torch.Tensor, per_class: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(training indices, validation indices): `per_class` images of each class held out for choosing a
    recipe without reading the test set. They come from the training images the subset left out, so the
    training set is the one the run trains on without a hold-out; a class that has too few of those (no
    subset: the whole training set is kept) gives them from its kept images, which the training set loses.
    """
    if not (is_number(per_class, numbers.Integral) and per_class >= 1):
        raise ConfigError(f"holdout_per_class must be a positive integer, got {per_class!r}")
    generator = torch.Generator().manual_seed(seed * 1_000_003 + HOLDOUT_STREAM)
    kept_mask = torch.zeros(len(labels), dtype=torch.bool)
    kept_mask[keep] = True
    held = []
    for label in labels.unique(sorted=True).tolist():
        of_class = labels == label
        pool = (of_class & ~kept_mask).nonzero().flatten()
        if len(pool) < per_class:  # the kept images are the only pool left
            pool = (of_class & kept_mask).nonzero().flatten()
            if len(pool) <= per_class:
                raise ConfigError(
                    f"holdout_per_class={per_class} but class {label} has only {len(pool)} training images "
                    f"to hold out from and train on; lower holdout_per_class"
                )
        held.append(pool[torch.randperm(len(pool), generator=generator)[:per_class]])
    validation = torch.cat(held).sort().values
    kept_mask[validation] = False
    return kept_mask.nonzero().flatten(), validation
