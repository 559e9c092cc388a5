"""The memory guard refuses only models that can never train here, whatever else the machine runs."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn as nn

from convinit.config import resolve_config
from convinit.errors import ConfigError
from convinit.train import validation
from convinit.train.plan import largest_batch
from convinit.train.validation import check_fits_in_memory, validate

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
    with torch.device("meta"):  # 4e8 parameters: about 6 GiB of weights, gradients, moments
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 20_000), nn.Linear(20_000, 20_000))
    monkeypatch.setattr(validation, "open", fake_meminfo(total_gib=64, available_gib=1), raising=False)
    check_fits_in_memory(model, 8, 1, 8, torch.device("cpu"))  # busy now, but it fits the machine
    monkeypatch.setattr(validation, "open", fake_meminfo(total_gib=4, available_gib=4), raising=False)
    with pytest.raises(ConfigError, match="but cpu has 4.0 GiB of memory in all"):
        check_fits_in_memory(model, 8, 1, 8, torch.device("cpu"))


@pytest.mark.parametrize(("mode", "where"), [("device", "cpu"), ("auto", "cpu")])
def test_a_fixed_format_set_too_large_for_the_memory_that_must_hold_it_is_refused_before_reading(
    monkeypatch, mode, where
):
    """digits is 1,000 training images of 64 bytes: a machine of 32 KiB cannot hold it decoded."""
    monkeypatch.setattr(validation, "total_memory", lambda device: 32 * 1024)
    with pytest.raises(ConfigError, match=f"need 0.0 GiB decoded but {where} has 0.0 GiB of memory in all"):
        validate(resolve_config(None, [f"data_mode={mode}", "device=cpu"]))


class OverflowsOnMeta(nn.Module):
    """A forward whose sizes overflow a storage, as img_size=100000's attention does on the meta device."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(2**62, 2**62)


def test_an_activation_estimate_that_fails_is_a_refusal_never_zero_bytes():
    with torch.device("meta"):
        model = OverflowsOnMeta()
    with pytest.raises(
        ConfigError, match="cannot be estimated: its forward pass on a batch of 8x1x8x8"
    ) as info:
        check_fits_in_memory(model, 8, 1, 8, torch.device("cpu"))
    assert "overflow" in str(info.value) and "\n" not in str(info.value)


def test_an_image_size_the_machine_cannot_hold_is_refused_from_the_meta_model(monkeypatch):
    """img_size=100000 was weighed by its parameters alone and then OOM-killed while the real model was
    built; its position table and activations are weighed on the meta device now."""
    monkeypatch.setattr(validation, "total_memory", lambda device: 64 * GIB)
    with pytest.raises(ConfigError, match=r"GiB of buffers; .* but cpu has 64.0 GiB of memory in all"):
        validate(resolve_config(None, ["img_size=100000", "device=cpu"]))


def test_a_model_refused_for_its_arguments_is_never_built_for_real(monkeypatch):
    """The constructor's refusal and the search for the argument behind it run on the meta device, so a
    refused model allocates none of its weights however wide it is (timm's embed_dim=2001 with 4 heads
    took 3 GB and 12 s to refuse, four times wider would have needed 37 GB). The stand-in constructor
    refuses as timm's does and records the device of every construction."""
    from convinit.train import plan

    devices = []

    def constructor(name, num_classes, img_size, in_chans, **model_args):
        devices.append(torch.empty(0).device.type)
        if model_args.get("dim", 64) % model_args.get("heads", 4):
            raise AssertionError("dim should be divisible by heads")
        return nn.Linear(model_args.get("dim", 64), num_classes)

    monkeypatch.setattr(plan, "build_model_by_name", constructor)
    with pytest.raises(ConfigError, match=r"with model_args.dim=2001: dim should be divisible by heads$"):
        validate(resolve_config(None, ["model_args.dim=2001", "device=cpu"]))  # the preset's 4 heads
    assert devices and set(devices) == {"meta"}


def test_a_folder_sets_model_too_large_for_the_machine_is_refused_before_its_run_folder_is_written(
    tmp_path, monkeypatch, tiny_overrides
):
    """A folder's model waits for the data's shape, so validate cannot weigh it: the build weighs it on the
    shape read, on the meta device, before the run folder is written (it was weighed only when built, after
    the folder held its config). The folder holds its owner's lock alone, so a rerun starts afresh."""
    from convinit.speed.stream import fabricate_folder
    from convinit.train import train

    folder = fabricate_folder(tmp_path / "images", classes=2, per_class=3, val_per_class=1)
    data = [f"data_dir={folder}", "dataset=folder", "data_mode=device", "img_size=8", "device=cpu"]
    monkeypatch.setattr(validation, "total_memory", lambda device: 4096)  # bytes: no model fits
    with pytest.raises(ConfigError, match=r"but cpu has 0.0 GiB of memory in all"):
        train(resolve_config(None, [*tiny_overrides, "epochs=1", *data]), tmp_path / "run", progress=False)
    assert [path.name for path in (tmp_path / "run").iterdir()] == [".owner.lock"]
