"""What the data layer needs to know of a run, and nothing else: the recipe `convinit.train.plan` hands
to `build_data`, so that the data layer never reads the training configuration (docs/architecture.md).

The field names are the configuration keys they come from, so the plan takes them by name (the values and
their defaults are the configuration's, never repeated here), and a key the data layer starts to read is
one field added here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AugmentRecipe:
    """How training batches are augmented and how a streamed test image is cropped."""

    crop_padding: int
    resized_crop_scale: float | None  # RandomResizedCrop's smallest area fraction; None: no crop
    hflip: bool
    randaugment_n: int
    randaugment_m: float
    randaugment_mstd: float
    randaugment_policy: str
    random_erasing: float
    crop_pct: float  # streamed evaluation: resize to img_size / crop_pct, centre-crop img_size


@dataclass(frozen=True)
class DataRecipe:
    """Which images a run reads, which of them it trains on, how they are served and in what batches."""

    dataset: str
    data_dir: str | None
    download: bool
    options: dict[str, Any] = field(hash=False)  # the reader's own keys (hf_name ...)
    img_size: int | None  # None: the dataset's own size
    train_fraction: float | None
    per_class: int | None
    subset_order: str
    # images per class held out of the training pool and evaluated instead of the test set (None: none)
    holdout_per_class: int | None
    seed: int  # of the subset and of the epoch order
    data_mode: str
    data_budget_gb: float | None
    workers: int
    batch_size: int
    drop_last: bool  # drop the last partial batch (once there is more than one batch)
    eval_batch_size: int
    repeated_aug: int
    augment: AugmentRecipe
