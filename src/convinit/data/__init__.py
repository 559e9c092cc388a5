"""Datasets (one reader per on-disk format), subsets, the device-resident loader and augmentation."""

from convinit.data import cifar, digits, folder, hf, idx, svhn, tiny_imagenet  # noqa: F401  (register datasets)
from convinit.data.augment import BatchAugment, MixupCutmix
from convinit.data.datasets import (
    ImageDataset,
    check_available,
    dataset_info,
    dataset_options,
    list_datasets,
    load_dataset,
    register_dataset,
)
from convinit.data.loader import DeviceLoader
from convinit.data.subsets import stratified_subset

__all__ = [
    "BatchAugment",
    "DeviceLoader",
    "ImageDataset",
    "MixupCutmix",
    "check_available",
    "dataset_info",
    "dataset_options",
    "list_datasets",
    "load_dataset",
    "register_dataset",
    "stratified_subset",
]
