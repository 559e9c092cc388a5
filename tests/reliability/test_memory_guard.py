"""The memory guard refuses only models that can never train here, whatever else the machine runs."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn as nn

from convinit.config import resolve_config
from convinit.errors import ConfigError
from convinit.train import memory_guard
from convinit.train.memory_guard import check_fits_in_memory, largest_batch
from convinit.train.validation import validate

GIB = 1 << 30


def test_the_guard_sizes_activations_by_the_largest_batch_the_training_set_can_form():
    assert largest_batch(100_000, "digits", 10, None, None) == 1000
    assert largest_batch(100_000, "digits", 10, 5, None) == 50
    assert largest_batch(64, "digits", 10, None, None) == 64
    assert largest_batch(100_000, "folder", 10, None, None) == 100_000  # unknown size: as asked
    validate(resolve_config(None, ["batch_size=100000", "device=cpu"]))  # 1,000 digits: a batch of 1,000


def fake_meminfo(total_gib: int, available_gib: int):
    text = f"MemTotal: {total_gib * GIB // 1024} kB\nMemAvailable: {available_gib * GIB // 1024} kB\n"
    return lambda *args, **kwargs: io.StringIO(text)


def test_the_verdict_uses_the_devices_total_memory_not_what_other_processes_leave_free(monkeypatch):
    with torch.device("meta"):
        model = nn.Linear(20_000, 20_000)  # 4e8 parameters: about 6 GiB of weights, gradients, moments
    monkeypatch.setattr(memory_guard, "open", fake_meminfo(total_gib=64, available_gib=1), raising=False)
    check_fits_in_memory(model, 8, 1, 8, torch.device("cpu"))  # busy now, but it fits the machine
    monkeypatch.setattr(memory_guard, "open", fake_meminfo(total_gib=4, available_gib=4), raising=False)
    with pytest.raises(ConfigError, match="but cpu has 4.0 GiB of memory in all"):
        check_fits_in_memory(model, 8, 1, 8, torch.device("cpu"))


@pytest.mark.parametrize(("mode", "where"), [("device", "cpu"), ("auto", "cpu")])
def test_a_fixed_format_set_too_large_for_the_memory_that_must_hold_it_is_refused_before_reading(
    monkeypatch, mode, where
):
    """digits is 1,000 training images of 64 bytes: a machine of 32 KiB cannot hold it decoded."""
    monkeypatch.setattr(memory_guard, "total_memory", lambda device: 32 * 1024)
    with pytest.raises(ConfigError, match=f"need 0.0 GiB decoded but {where} has 0.0 GiB of memory in all"):
        validate(resolve_config(None, [f"data_mode={mode}", "device=cpu"]))
