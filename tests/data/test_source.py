"""A run's data source: `auto` picks the device or the stream by the decoded size, both serve batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from convinit.config import resolve_config
from convinit.data import DeviceLoader
from convinit.data.source import build_data
from convinit.data.streamed_loader import StreamLoader
from convinit.errors import ConfigError
from convinit.train.plan import data_recipe

pytest.importorskip("timm")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory) -> Path:
    """An ImageNet-style folder: train/ and val/, 20 classes, JPEGs of mixed sizes and aspect ratios."""
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    sizes = [(48, 36), (30, 52), (64, 64), (80, 40)]
    for split, per_class in (("train", 4), ("val", 1)):
        for c in range(20):
            (root / split / f"class{c:02d}").mkdir(parents=True)
            for i in range(per_class):
                w, h = sizes[(c + i) % len(sizes)]
                Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
                    root / split / f"class{c:02d}" / f"{i}.jpg"
                )
    return root


def data_of(cfg, device: torch.device):
    """The data source `convinit train` builds for `cfg`: from its plan's data recipe."""
    return build_data(data_recipe(cfg), device)


def folder_config(root: Path, *overrides: str):
    return resolve_config(
        "default",
        ["dataset=folder", f"data_dir={root}", "img_size=32", "batch_size=8", "workers=0", *overrides],
    )


def test_auto_keeps_a_folder_on_the_device_when_it_fits_the_budget(jpeg_folder):
    data = build_data(data_recipe(folder_config(jpeg_folder, "data_budget_gb=1")), CPU)
    assert data.mode == "device" and "fits" in data.reason and isinstance(data.train, DeviceLoader)


def test_auto_streams_a_folder_larger_than_the_budget_and_says_why(jpeg_folder):
    data = build_data(
        data_recipe(folder_config(jpeg_folder, "data_budget_gb=0.00001", "repeated_aug=3")), CPU
    )
    assert data.mode == "stream" and "exceeds" in data.reason and isinstance(data.train, StreamLoader)
    assert (data.num_classes, data.in_chans, data.img_size, data.train_size) == (20, 3, 32, 80)
    images, labels = next(iter(data.train))
    inputs = data.augment(images)
    assert inputs.shape == (8, 3, 32, 32) and inputs.dtype == torch.float32 and labels.shape == (8,)
    assert data.test_batch(5, CPU).shape == (5, 3, 32, 32)


def test_a_dataset_read_whole_can_be_streamed_per_sample():
    data = build_data(
        data_recipe(resolve_config("default", ["data_mode=stream", "workers=0", "batch_size=16"])), CPU
    )
    assert data.mode == "stream" and data.in_chans == 1 and data.img_size == (8, 8)
    images, _ = next(iter(data.train))
    assert data.augment(images).shape == (16, 1, 8, 8)


def test_auto_sizes_a_hugging_face_dataset_and_streams_it_when_larger_than_the_budget(tmp_path, digits):
    """Not only folders: a set its reader decodes whole is sized before it goes to the (pretend) GPU."""
    from unittest import mock

    from convinit.data.datasets import load_dataset
    from convinit.speed.fake_cuda import CUDA, fake_cuda
    from tests.data.test_hf_reader import digits_split

    datasets = pytest.importorskip("datasets")
    path = tmp_path / "saved"
    splits = dict(train=digits_split(digits, "train", 40), test=digits_split(digits, "test", 10))
    datasets.DatasetDict(**splits).save_to_disk(str(path))
    dataset = load_dataset("hf", path)
    overrides = ["dataset=hf", f"data_dir={path}", "workers=0", "batch_size=8", "crop_padding=0"]
    with fake_cuda(), mock.patch("convinit.data.source.load_dataset", lambda *args, **kwargs: dataset):
        fits = data_of(resolve_config("default", [*overrides, "data_budget_gb=1"]), CUDA)
        data = build_data(
            data_recipe(resolve_config("default", [*overrides, "data_budget_gb=0.000001"])), CUDA
        )
    assert fits.mode == "device" and "fits the 1.00 GiB budget" in fits.reason
    assert data.mode == "stream" and isinstance(data.train, StreamLoader)
    assert data.reason == "0.00 GiB decoded exceeds the 0.00 GiB budget: streamed from host memory"
    cpu = build_data(data_recipe(resolve_config("default", [*overrides, "data_budget_gb=0.000001"])), CPU)
    assert cpu.mode == "device" and "where a CPU run keeps it" in cpu.reason  # streaming would save nothing


def test_device_mode_refuses_in_one_line_a_set_larger_than_the_devices_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10_000, 10**9))
    cfg = resolve_config("default", ["data_mode=device"])  # digits: 1,797 images of 64 bytes
    with pytest.raises(ConfigError) as refused:
        build_data(data_recipe(cfg), torch.device("cuda"))
    message = str(refused.value)
    assert message.startswith("data_mode=device: digits's decoded images need") and "\n" not in message
    assert "has 0.00 GiB free; use data_mode=auto or data_mode=stream" in message


def test_device_mode_serves_uint8_batches_that_the_augmentation_normalises():
    data = build_data(data_recipe(resolve_config("default", ["batch_size=16"])), CPU)
    assert data.mode == "device"
    images, _ = next(iter(data.train))
    assert images.dtype == torch.uint8 and data.augment(images).dtype == torch.float32


def test_a_streamed_folder_run_killed_mid_epoch_resumes_to_the_same_weights(
    jpeg_folder, tmp_path, monkeypatch
):
    """The ImageNet-style path end to end: stream forced by a tiny budget, DeiT's repeated augmentation,
    random resized crops, RandAugment and erasing per sample in worker processes; a Ctrl-C mid-epoch and
    a resume end bit-identical to an uninterrupted run (deterministic, on the CPU)."""
    import signal

    from convinit.data import MixupCutmix
    from convinit.runs.signals import RunInterrupted
    from convinit.train import train

    overrides = [
        "data_budget_gb=0.00001", "workers=2", "repeated_aug=3", "resized_crop_scale=0.08", "hflip=true",
        "randaugment_n=2", "randaugment_mstd=0.5", "random_erasing=0.25", "epochs=2", "deterministic=true",
        "model_args.patch_size=8", "model_args.depth=1", "model_args.dim=16", "model_args.heads=2",
    ]  # fmt: skip
    cfg = folder_config(jpeg_folder, *overrides)
    reference = train(cfg, run_dir=tmp_path / "reference", progress=False)
    steps = 80 // 8  # 80 training images, batch 8: the epoch length repeated augmentation keeps
    calls = {"n": 0}
    original = MixupCutmix.__call__

    def ctrl_c_in_epoch_two(self, images, labels):
        calls["n"] += 1
        if calls["n"] == steps + 3:
            signal.raise_signal(signal.SIGINT)
        return original(self, images, labels)

    monkeypatch.setattr(MixupCutmix, "__call__", ctrl_c_in_epoch_two)
    with pytest.raises(RunInterrupted):
        train(cfg, run_dir=tmp_path / "resumed", progress=False)
    monkeypatch.setattr(MixupCutmix, "__call__", original)
    resumed = train(run_dir=tmp_path / "resumed", resume=True, progress=False)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    assert resumed.metrics[-1]["test_acc"] == reference.metrics[-1]["test_acc"]
    with Image.open(tmp_path / "reference" / "augmentations.png") as grid:  # 32 samples, 8 to a row
        assert grid.size == (8 * 66 + 2, 4 * (66 + 14) + 2)  # 14 px of class name under each


def test_a_device_run_writes_a_grid_of_its_augmented_samples(tmp_path, tiny_overrides):
    from convinit.train import train

    cfg = resolve_config(None, tiny_overrides + ["epochs=1", "crop_padding=1", "randaugment_n=2"])
    run = train(cfg, run_dir=tmp_path / "run", progress=False)
    with Image.open(run.run_dir / "augmentations.png") as grid:
        assert grid.size == (8 * 66 + 2, 4 * (66 + 14) + 2)  # digits: 8 px enlarged 8 times, 2 px padding


def test_a_streamed_folder_is_normalised_by_its_own_statistics_as_on_the_device(jpeg_folder):
    """Whichever path `auto` picks, the same folder trains with (about) the same normalisation."""
    streamed = build_data(data_recipe(folder_config(jpeg_folder, "data_budget_gb=0.00001")), CPU)
    resident = build_data(data_recipe(folder_config(jpeg_folder, "data_budget_gb=1")), CPU)
    assert (streamed.mode, resident.mode) == ("stream", "device")
    np.testing.assert_allclose(streamed.mean, resident.mean, atol=0.01)  # the device path resizes first
    images, _ = next(iter(streamed.test))
    inputs = streamed.eval_transform(images)
    assert abs(float(inputs.mean())) < 0.1  # centred by the statistics it records


def test_a_small_set_trains_every_image_every_epoch_and_a_paper_preset_drops_the_partial_batch():
    """120 digits at batch 64: the default keeps the partial batch (2 steps, 120 images an epoch); the
    paper presets drop it as the papers' code does (1 step, 64 images)."""
    kept = data_of(resolve_config("default", ["per_class=12", "batch_size=64"]), CPU)
    assert len(kept.train) == 2 and sum(len(labels) for _, labels in kept.train) == 120
    dropped = data_of(
        resolve_config("paper1/vit_small", ["dataset=digits", "per_class=12", "batch_size=64"]), CPU
    )
    assert len(dropped.train) == 1 and sum(len(labels) for _, labels in dropped.train) == 64


def test_a_streamed_small_set_keeps_its_partial_batch_too(jpeg_folder):
    streamed = build_data(data_recipe(folder_config(jpeg_folder, "data_budget_gb=0.00001")), CPU)
    assert streamed.mode == "stream" and len(streamed.train) == 10  # 80 images at batch 8
    streamed = build_data(
        data_recipe(folder_config(jpeg_folder, "data_budget_gb=0.00001", "batch_size=12")), CPU
    )
    assert len(streamed.train) == 7  # 80 = 6 * 12 + 8: the partial batch is a step of its own
