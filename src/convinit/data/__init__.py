"""Datasets (one reader per on-disk format), subsets, the device-resident loader and augmentation.

Names are imported on first use: listing datasets (`convinit datasets`) needs no torch, and the
registry imports every reader module of `data/readers/` when first asked for a name.
"""

from __future__ import annotations

from convinit.naming.lazy_exports import lazy_exports

_EXPORTS = {
    "BatchAugment": "convinit.data.augmentation.batch_augment",
    "MixupCutmix": "convinit.data.augmentation.batch_augment",
    "ImageDataset": "convinit.data.datasets",
    "check_available": "convinit.data.datasets",
    "dataset_info": "convinit.data.datasets",
    "list_datasets": "convinit.data.datasets",
    "load_dataset": "convinit.data.datasets",
    "register_dataset": "convinit.data.datasets",
    "DeviceLoader": "convinit.data.device_loader",
    "holdout_split": "convinit.data.subsets",
    "stratified_subset": "convinit.data.subsets",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
