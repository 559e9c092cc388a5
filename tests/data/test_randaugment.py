"""Batched RandAugment and random erasing against the definitions they follow (timm's and torchvision's)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from PIL import Image

from convinit.data.augmentation.batch_augment import BatchAugment, random_erasing
from convinit.data.augmentation.randaugment import (
    GEOMETRIC_OPS,
    PIXEL_OPS,
    BatchRandAugment,
    affine_matrix,
    pixel_op,
    warp,
)
from convinit.data.augmentation.randaugment_torchvision import TorchvisionRandAugment

FILL = (124, 116, 104)


@pytest.fixture(scope="module")
def image() -> Image.Image:
    """A smooth 40x32 RGB image: geometric comparisons need neighbours that resemble each other."""
    pixels = np.random.default_rng(0).integers(0, 256, (8, 8, 3)).astype(np.uint8)
    return Image.fromarray(pixels).resize((40, 32), Image.BICUBIC)


def timm_op(name: str, img: Image.Image, level: float, sign: float) -> np.ndarray:
    """timm's AugmentOp `name` at magnitude 10 * level, always applied, with its random sign forced."""
    aa = pytest.importorskip("timm.data.auto_augment")
    hparams = dict(img_mean=FILL, interpolation=Image.BICUBIC)
    op = aa.AugmentOp(name, prob=1.0, magnitude=10 * level, hparams=hparams)
    seed = next(s for s in range(100) if (random.Random(s).random() > 0.5) == (sign < 0))
    random.seed(seed)  # timm negates a signed level when random.random() > 0.5
    return np.asarray(op(img)).astype(np.float64)


def ours(name: str, img: Image.Image, level: float, sign: float) -> np.ndarray:
    x = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None].double()
    levels, signs = torch.tensor([level], dtype=torch.double), torch.tensor([sign], dtype=torch.double)
    if name in PIXEL_OPS:
        out = pixel_op(name, x, levels, signs)
    else:
        out = warp(
            x, affine_matrix(name, levels, signs, 32, 40), torch.tensor(FILL, dtype=torch.double)
        ).round()
    return out[0].permute(1, 2, 0).numpy()


@pytest.mark.parametrize("name", PIXEL_OPS)
@pytest.mark.parametrize("level, sign", [(0.9, 1.0), (0.9, -1.0), (0.35, 1.0)])
def test_each_pixel_operation_equals_timms(image, name, level, sign):
    difference = np.abs(ours(name, image, level, sign) - timm_op(name, image, level, sign))
    assert difference.max() <= 1  # PIL blends in single precision: at most one level apart


@pytest.mark.parametrize("name", GEOMETRIC_OPS)
@pytest.mark.parametrize("level, sign", [(0.9, 1.0), (0.5, -1.0)])
def test_each_geometric_operation_matches_timms_up_to_the_bicubic_kernel(image, name, level, sign):
    difference = np.abs(ours(name, image, level, sign) - timm_op(name, image, level, sign))
    assert difference.mean() < 1.5 and difference.max() <= 8  # torch's a = -0.75 against PIL's -0.5


def test_magnitude_is_read_on_timms_zero_to_ten_scale():
    full = affine_matrix("Rotate", torch.tensor([1.0]), torch.tensor([1.0]), 8, 8)[0]
    assert abs(math.degrees(math.atan2(full[0, 1], full[0, 0]))) == pytest.approx(30.0)  # level 1: 30 degrees
    with pytest.raises(ValueError, match=r"\[0, 10\]"):
        BatchRandAugment(2, 14.0)


def test_every_sample_draws_its_own_operations_each_applied_with_probability_one_half():
    torch.manual_seed(0)
    batch = torch.rand(1, 3, 12, 12).expand(400, 3, 12, 12).contiguous()
    out = BatchRandAugment(num_ops=1, magnitude=9, magnitude_std=0.5, prob=0.5)(batch)
    unchanged = (out - (batch * 255).round() / 255).abs().amax(dim=(1, 2, 3)) < 1e-6
    assert 0.4 < unchanged.float().mean() < 0.6
    assert len({tuple(o.flatten()[:20].tolist()) for o in out[~unchanged]}) > 50


def test_torchvision_policy_equals_torchvisions_randaugment_for_a_single_image():
    from torchvision.transforms import RandAugment

    image = torch.randint(
        0, 256, (1, 3, 16, 16), generator=torch.Generator().manual_seed(1), dtype=torch.uint8
    )
    batched = TorchvisionRandAugment(num_ops=1, magnitude=14)
    for seed in range(40):  # one op per call: the same draws as torchvision's, which covers every op
        torch.manual_seed(seed)
        expected = RandAugment(num_ops=1, magnitude=14)(image)
        torch.manual_seed(seed)
        got = batched(image.float() / 255)
        assert torch.equal((got * 255).round().to(torch.uint8), expected), seed


def test_random_erasing_fills_one_box_of_timms_size_with_noise_per_pixel():
    torch.manual_seed(0)
    x = torch.zeros(2000, 3, 20, 20)
    out = random_erasing(x, prob=0.25)
    erased = (out != 0).any(dim=1)  # (B, H, W)
    hit = erased.any(dim=(1, 2))
    assert 0.22 < hit.float().mean() < 0.28
    for box in erased[hit][:200]:
        rows, cols = box.any(dim=1).nonzero(), box.any(dim=0).nonzero()
        height, width = len(rows), len(cols)
        assert box.sum() == height * width  # one rectangle
        assert 0.02 * 400 - 3 <= height * width <= 400 / 3 + 3 * 20
    values = out[hit]
    assert values[values != 0].std() == pytest.approx(1.0, abs=0.05)


def test_batch_augment_refuses_an_unknown_randaugment_policy():
    with pytest.raises(ValueError, match="randaugment_policy must be one of timm, torchvision"):
        BatchAugment((0.5,), (0.25,), train=True, randaugment_n=2, randaugment_policy="kornia")


@pytest.mark.parametrize("channels", [3, 1])
def test_the_grouped_read_free_round_equals_the_per_operation_round_for_the_same_draws(channels):
    """What an accelerator runs (value maps, one blend, one resampling for the whole batch) against what
    the CPU runs (each operation on the samples that drew it): the same draws, the same pixels."""
    x = torch.rand(1, channels, 8, 8).repeat(256, 1, 2, 3)  # smooth-ish 16x24 images with flat areas
    x = (x + 0.2 * torch.rand_like(x)).clamp(0, 1)
    x[:8] = 0.5  # flat images: AutoContrast and Equalize keep them
    fill = (0.4, 0.5, 0.6)[:channels]
    for seed in range(3):
        outputs = []
        for read_free in (False, True):
            torch.manual_seed(seed)
            outputs.append(BatchRandAugment(2, 9, 0.5, prob=0.9, fill=fill, read_free=read_free)(x))
        assert torch.equal(outputs[0], outputs[1]), seed


@pytest.mark.parametrize("name", GEOMETRIC_OPS + PIXEL_OPS)
def test_each_operation_alone_is_the_same_grouped_as_per_operation(name):
    x = (torch.rand(1, 3, 6, 6).repeat(32, 1, 3, 3) * 0.8 + 0.1).round(decimals=2)
    results = []
    for read_free in (False, True):
        torch.manual_seed(0)
        augment = BatchRandAugment(
            1, 9, 0.5, prob=0.5, fill=(0.4, 0.5, 0.6), ops=(name,), read_free=read_free
        )
        results.append(augment(x))
    assert torch.equal(results[0], results[1])
    assert not torch.equal(results[0], (x * 255).round() / 255)  # the operation did something


def test_accelerators_run_the_grouped_round_and_the_cpu_the_per_operation_one(monkeypatch):
    augment, calls = BatchRandAugment(1, 9), []
    monkeypatch.setattr(augment, "grouped_round", lambda x, *_: calls.append("grouped") or x)
    monkeypatch.setattr(augment, "per_op_round", lambda x, *_: calls.append("per op") or x)
    augment(torch.rand(2, 3, 4, 4))
    with torch.device("meta"):
        augment(torch.rand(2, 3, 4, 4))
    assert calls == ["per op", "grouped"]


def torchvision_per_image(images: torch.Tensor, draws, magnitude: int) -> torch.Tensor:
    """torchvision's own operations, image by image, with the batch's draws."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op

    augment = TorchvisionRandAugment(len(draws), magnitude)
    out = []
    for i, image in enumerate(images):
        for op, negate in draws:
            space = augment.reference._augmentation_space(31, tuple(image.shape[-2:]))
            name = list(space)[op[i]]
            magnitudes, signed = space[name]
            value = float(magnitudes[magnitude]) if magnitudes.ndim > 0 else 0.0
            value = -value if signed and negate[i] else value
            image = _apply_op(image, name, value, InterpolationMode.NEAREST, None)
        out.append(image)
    return torch.stack(out)


@pytest.mark.parametrize("channels", [3, 1])
def test_torchvision_policy_batch_equals_torchvisions_operations_image_by_image(channels):
    generator = torch.Generator().manual_seed(channels)
    images = torch.randint(0, 256, (1, channels, 6, 5), generator=generator, dtype=torch.uint8)
    images = images.repeat(96, 1, 3, 4)  # 18x20 with repeated structure; some flat images too
    images = (images.float() * torch.rand(96, 1, 1, 1, generator=generator)).to(torch.uint8)
    images[:4] = 77
    augment = TorchvisionRandAugment(num_ops=2, magnitude=14)
    torch.manual_seed(5)
    draws = [augment.draw(len(images), images.device) for _ in range(2)]
    torch.manual_seed(5)
    got = (augment(images.float() / 255) * 255).round().to(torch.uint8)
    assert torch.equal(got, torchvision_per_image(images, draws, 14))


def test_batched_equalize_equals_torchvisions_equalize_per_image():
    from torchvision.transforms.functional import equalize as torchvision_equalize

    from convinit.data.augmentation.randaugment import equalize

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (24, 3, 12, 10), generator=generator, dtype=torch.uint8)
    images[:8] = images[:8] // 37  # few distinct values
    images[8:12] = 200  # flat: equalize keeps them
    images[12:16, :, :6] = 0  # a dominant value
    expected = torch.stack([torchvision_equalize(image) for image in images])
    assert torch.equal(equalize(images.float()).to(torch.uint8), expected)
