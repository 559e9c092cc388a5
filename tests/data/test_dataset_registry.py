"""The dataset registry finds its datasets by importing every module of `convinit.data.readers`."""

from __future__ import annotations

import pkgutil

import convinit.data.readers
from convinit.data.datasets import DATASETS, dataset_info, list_datasets
from tests.naming.dropped_module import dropped_module

DROPPED_READER = """
from convinit.data.datasets import DatasetInfo, register_dataset

register_dataset(DatasetInfo(name="dropped-set", reader=lambda root, download: None,
                             how_to_obtain="it is made up", needs_dir=False))
"""


def test_every_module_of_the_readers_package_is_a_reader_that_registers_a_dataset():
    readers = {info.reader.__module__ for info in map(dataset_info, list_datasets())}
    package = convinit.data.readers
    modules = {f"{package.__name__}.{module.name}" for module in pkgutil.iter_modules(package.__path__)}
    assert modules == readers


def test_a_reader_file_added_to_the_readers_package_registers_its_dataset_with_nothing_else_changed(tmp_path):
    shipped = list_datasets()
    with dropped_module(DATASETS, tmp_path, DROPPED_READER):
        assert list_datasets() == sorted([*shipped, "dropped-set"])
        assert dataset_info("dropped-set").how_to_obtain == "it is made up"
    assert list_datasets() == shipped


def test_a_declared_shape_is_what_the_reader_reads():
    """Validation plans the model and the largest batch from `DatasetInfo.shape` before reading: it must be
    what the reader gives (checked on every set with a declared shape that is readable here)."""
    from convinit.data.datasets import check_available, load_dataset

    checked = []
    for name in list_datasets():
        known = dataset_info(name).shape
        if known is None:
            continue
        try:
            check_available(name, None, False)
        except Exception:
            continue
        dataset = load_dataset(name)
        assert (dataset.num_classes, dataset.in_chans, dataset.img_size, len(dataset.train_labels)) == (
            known.num_classes,
            known.in_chans,
            (known.side, known.side),
            known.train_images,
        ), name
        checked.append(name)
    assert "digits" in checked
