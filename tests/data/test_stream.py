"""The streamed data path: timm's DeiT transforms per sample, repeated augmentation, exact resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from convinit.data.device_loader import DeviceLoader
from convinit.data.readers.folder import folder_splits
from convinit.data.streamed_loader import (
    StreamingImages,
    StreamLoader,
    StreamRecipe,
    choose_data_mode,
    sample_seed,
    sample_seeds,
    seed_sample,
)

timm_data = pytest.importorskip("timm.data")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZES = [(40, 30), (64, 48), (33, 57), (90, 40), (50, 50)]  # (width, height): mixed sizes and aspect ratios


@pytest.fixture(scope="module")
def imagenet_style(tmp_path_factory) -> Path:
    """An ImageNet-style folder: train/ and val/ with 20 class folders of JPEGs of varied sizes."""
    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 3), ("val", 1)):
        for c in range(20):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                width, height = SIZES[(c + i) % len(SIZES)]
                pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"img{i}.JPEG", quality=90)
    return root


def streamed(root: Path, split: str = "train", **recipe) -> StreamingImages:
    files = folder_splits(root)
    recipe = StreamRecipe(img_size=32, mean=MEAN, std=STD, **recipe)
    transform = recipe.train_transform() if split == "train" else recipe.eval_transform()
    paths, labels = (
        (files.train_paths, files.train_labels) if split == "train" else (files.test_paths, files.test_labels)
    )
    return StreamingImages(paths, labels, transform)


def test_train_transform_then_the_device_half_is_timms_deit_transform(imagenet_style):
    """Workers ship uint8 (crop, flip, RandAugment); the device normalises: together timm's transform."""
    recipe = StreamRecipe(img_size=32, mean=MEAN, std=STD)
    data, finish = streamed(imagenet_style), recipe.device_augment(train=False)
    reference = timm_data.create_transform(
        (3, 32, 32), is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.0,
        interpolation="bicubic", mean=MEAN, std=STD,
    )  # fmt: skip
    for index in range(5):
        ours, _ = data[index, 1234 + index]
        assert ours.dtype == torch.uint8 and ours.shape == (3, 32, 32)
        seed_sample(1234 + index)
        with Image.open(data.source[index]) as img:
            theirs = reference(img.convert("RGB"))
        torch.testing.assert_close(finish(ours[None])[0], theirs, rtol=0, atol=0)


def test_the_device_half_of_training_erases_as_timm_with_per_pixel_noise():
    recipe = StreamRecipe(img_size=16, mean=MEAN, std=STD, random_erasing=1.0)
    images = torch.full((64, 3, 16, 16), 128, dtype=torch.uint8)
    torch.manual_seed(0)
    out = recipe.device_augment(train=True)(images)
    plain = recipe.device_augment(train=False)(images)
    erased = (out != plain).any(dim=1)  # (B, H, W)
    assert erased.any(dim=(1, 2)).float().mean() > 0.9  # probability 1, unless no attempt fits
    assert torch.equal(out[~erased.unsqueeze(1).expand_as(out)], plain[~erased.unsqueeze(1).expand_as(out)])


def test_per_sample_seeds_are_distinct_and_depend_only_on_seed_epoch_and_position():
    positions = np.arange(200_000)
    seeds = sample_seeds(7, 3, positions)
    assert len(np.unique(seeds)) == len(seeds) and (seeds >= 0).all()
    assert sample_seed(7, 3, 12345) == seeds[12345]
    assert not np.array_equal(sample_seeds(7, 4, positions[:100]), seeds[:100])
    assert not np.array_equal(sample_seeds(8, 3, positions[:100]), seeds[:100])


def test_images_of_any_size_come_out_cropped_and_each_sample_differently(imagenet_style):
    data = streamed(imagenet_style)
    crops = [data[i, sample_seed(0, 0, i)][0] for i in range(len(SIZES))]
    assert all(c.shape == (3, 32, 32) for c in crops)
    first, again = data[0, sample_seed(0, 0, 0)][0], data[0, sample_seed(0, 0, 1)][0]
    assert not torch.equal(first, again)


def test_evaluation_resizes_the_short_side_by_crop_pct_then_centre_crops(imagenet_style):
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    data = streamed(imagenet_style, split="test")
    finish = StreamRecipe(img_size=32, mean=MEAN, std=STD).device_augment(train=False)
    for index in range(3):
        ours, _ = data[index, 0]
        with Image.open(data.source[index]) as img:
            resized = F.resize(img.convert("RGB"), int(32 / 0.875), InterpolationMode.BICUBIC)
            expected = F.normalize(F.to_tensor(F.center_crop(resized, [32, 32])), MEAN, STD)
        torch.testing.assert_close(finish(ours[None])[0], expected)


def test_device_loader_repeats_and_resumes_as_the_streamed_one():
    labels = torch.arange(40)
    loader = DeviceLoader(labels[:, None], labels, 6, shuffle=True, drop_last=True, seed=1, repeats=3)
    loader.set_epoch(2)
    whole = [batch_labels.tolist() for _, batch_labels in loader]
    assert len(whole) == 40 // 6 and whole[0][:3] == [whole[0][0]] * 3  # each image three times in a row
    loader.start_batch = 2
    assert [batch_labels.tolist() for _, batch_labels in loader] == whole[2:]


def test_resumed_epoch_sees_the_same_batches_whatever_the_worker_count(imagenet_style):
    data = streamed(imagenet_style)
    whole = StreamLoader(data, batch_size=8, seed=3, shuffle=True, drop_last=True, repeats=3)
    whole.set_epoch(2)
    expected = list(whole)
    resumed = StreamLoader(data, batch_size=8, seed=3, shuffle=True, drop_last=True, repeats=3, num_workers=2)
    resumed.set_epoch(2)
    resumed.start_batch = 2
    got = list(resumed)
    assert len(got) == len(expected) - 2
    for (images, labels), (want_images, want_labels) in zip(got, expected[2:], strict=True):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
    assert len(list(resumed)) == len(expected)  # start_batch applies to one epoch only


def test_auto_mode_keeps_data_on_the_device_only_below_the_budget():
    assert choose_data_mode("auto", 10, 100)[0] == "device"
    assert choose_data_mode("auto", 101, 100)[0] == "stream"
    mode, why = choose_data_mode("stream", 10, 100)
    assert mode == "stream" and "data_mode=stream" in why
    with pytest.raises(ValueError, match="auto, device or stream"):
        choose_data_mode("disk", 1, 1)


def test_posterize_at_full_magnitude_gives_black_instead_of_failing():
    """timm's PosterizeIncreasing keeps 0 bits at magnitude 10 (reached through mstd noise); Pillow now
    refuses 0 bits, so every streamed DeiT run would die on some sample without the swap."""
    from convinit.data.streamed_loader import posterize_bits

    image = Image.fromarray(np.full((6, 6, 3), 200, dtype=np.uint8))
    assert np.asarray(posterize_bits(image, 0)).max() == 0
    assert np.asarray(posterize_bits(image, 2)).max() == 192
    transform = StreamRecipe(img_size=8, mean=MEAN, std=STD, randaugment="rand-m10-n4-inc1").train_transform()
    for seed in range(50):
        seed_sample(seed)
        transform(image)


def test_sampled_statistics_are_the_pixel_statistics_of_the_sampled_images(imagenet_style):
    from convinit.data.streamed_loader import sampled_statistics

    def pixels(paths):
        return np.concatenate([np.asarray(Image.open(p).convert("RGB")).reshape(-1, 3) / 255 for p in paths])

    paths = folder_splits(imagenet_style).train_paths  # 60 small images: all sampled, none reduced
    mean, std = sampled_statistics(paths, 3)
    np.testing.assert_allclose(mean, pixels(paths).mean(0), rtol=1e-9)
    np.testing.assert_allclose(std, pixels(paths).std(0), rtol=1e-9)
    few, _ = sampled_statistics(paths, 3, count=6)  # every tenth image
    np.testing.assert_allclose(few, pixels(paths[::10]).mean(0), rtol=1e-9)


class Recorder:
    """Stand-ins for CUDA's streams and events and for a batch's tensors, writing what happens in order."""

    def __init__(self):
        self.log: list[str] = []
        self.current = "main"

    def stream(self, name: str):
        recorder = self

        class Stream:
            def wait_event(self, event):
                recorder.log.append(f"{name} waits for {event.name}")

        stream = Stream()
        stream.name = name
        return stream

    def event(self):
        recorder = self

        class Event:
            def record(self, stream):
                self.name = f"event after copy on {stream.name}"
                recorder.log.append(f"record event on {stream.name}")

        return Event()

    def stream_context(self, stream):
        recorder = self

        class Context:
            def __enter__(self):
                recorder.current = stream.name

            def __exit__(self, *exc):
                recorder.current = "main"

        return Context()

    def tensor(self, k: int):
        recorder = self

        class Moved:
            def record_stream(self, stream):
                recorder.log.append(f"batch {k} kept alive for {stream.name}")

        class Host:
            def to(self, device, non_blocking=False):
                assert non_blocking and device.type == "cuda"
                recorder.log.append(f"copy batch {k} on {recorder.current}")
                return Moved()

        return Host()


def test_the_side_stream_copy_is_waited_for_before_use_and_fetches_no_batch_ahead(monkeypatch):
    """Batch k is fetched, copied on the side stream, the training stream waits on its event, and only
    then is it used; batch k + 1 is not fetched before batch k is handed over."""
    from convinit.data import streamed_loader

    recorder = Recorder()
    main = recorder.stream("main")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: recorder.stream("side"))
    monkeypatch.setattr(torch.cuda, "stream", recorder.stream_context)
    monkeypatch.setattr(torch.cuda, "Event", recorder.event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: main)

    def batches():
        for k in range(2):
            recorder.log.append(f"fetch batch {k}")
            yield (recorder.tensor(k),)

    for k, _ in enumerate(streamed_loader.to_device(batches(), torch.device("cuda"))):
        recorder.log.append(f"use batch {k}")
    per_batch = [
        "fetch batch {k}", "copy batch {k} on side", "record event on side",
        "main waits for event after copy on side", "batch {k} kept alive for main", "use batch {k}",
    ]  # fmt: skip
    assert recorder.log == [line.format(k=k) for k in range(2) for line in per_batch]
