"""BatchAugment (uint8 batch -> normalised float batch, augmented in training) and MixupCutmix."""

import subprocess
import sys

import pytest
import torch

from convinit.data import BatchAugment, ImageDataset, MixupCutmix
from convinit.data.augmentation.batch_augment import random_horizontal_flip


def images(channels: int, batch: int = 16, size: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (batch, channels, size, size), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))  # fmt: skip


def normalised(x: torch.Tensor, mean, std) -> torch.Tensor:
    """The definition: [0, 1] pixels minus the dataset mean, over the dataset std, per channel."""
    c = x.shape[1]
    return (x.float() / 255 - torch.tensor(mean).view(1, c, 1, 1)) / torch.tensor(std).view(1, c, 1, 1)


MEAN = {1: (0.3,), 3: (0.4, 0.5, 0.6)}
STD = {1: (0.2,), 3: (0.25, 0.3, 0.35)}


def test_eval_pipeline_gives_zero_mean_unit_std_over_a_real_dataset(digits):
    out = BatchAugment(digits.mean, digits.std)(digits.train_images)
    assert out.mean().item() == pytest.approx(0.0, abs=1e-4)
    assert out.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)


def test_eval_pipeline_gives_zero_mean_unit_std_per_channel_for_colour_data():
    base = images(3, batch=64)
    base[:, 0] //= 4  # channels with different statistics
    base[:, 2] = 255 - base[:, 2] // 2
    dataset = ImageDataset("toy", base, torch.zeros(64), base, torch.zeros(64), ["a"])
    out = BatchAugment(dataset.mean, dataset.std)(dataset.train_images)
    assert torch.allclose(out.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(out.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-4)


@pytest.mark.parametrize("channels", [1, 3])
def test_eval_pipeline_is_exactly_normalisation(channels):
    x = images(channels)
    out = BatchAugment(MEAN[channels], STD[channels])(x)
    assert torch.allclose(out, normalised(x, MEAN[channels], STD[channels]))


@pytest.mark.parametrize("channels", [1, 3])
def test_training_pipeline_with_everything_off_is_identity_plus_normalise(channels):
    x = images(channels)
    out = BatchAugment(MEAN[channels], STD[channels], train=True)(x)
    assert torch.allclose(out, normalised(x, MEAN[channels], STD[channels]))
    assert torch.equal(x, images(channels))  # the uint8 input is not modified


def full_augment(channels: int) -> BatchAugment:
    options = dict(crop_padding=2, hflip=True, randaugment_n=2, randaugment_m=9, randaugment_mstd=0.5)
    return BatchAugment(MEAN[channels], STD[channels], train=True, random_erasing=0.5, **options)


@pytest.mark.parametrize("channels", [1, 3])
def test_training_pipeline_keeps_shape_and_float_dtype(channels):
    torch.manual_seed(0)
    augment = full_augment(channels)
    for seed in range(4):  # several RandAugment draws, including colour operations on 1-channel input
        out = augment(images(channels, seed=seed))
        assert out.shape == (16, channels, 8, 8) and out.dtype == torch.float32
        assert torch.isfinite(out).all()


def test_hflip_changes_images_and_each_output_is_the_input_or_its_mirror():
    torch.manual_seed(0)
    x = images(3)
    plain = normalised(x, MEAN[3], STD[3])
    out = BatchAugment(MEAN[3], STD[3], train=True, hflip=True)(x)
    assert not torch.allclose(out, plain)
    for o, p in zip(out, plain, strict=True):
        assert torch.allclose(o, p) or torch.allclose(o, p.flip(-1))


def test_horizontal_flip_mirrors_the_chosen_images_and_keeps_the_others():
    """The definition, and kornia's draw it replaced: one torch.rand(B) < p picks the mirrored samples."""
    x = torch.randn(64, 3, 5, 7, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(3)
    out = random_horizontal_flip(x, 0.5, x.device)
    after = torch.get_rng_state()
    torch.manual_seed(3)
    chosen = torch.rand(64) < 0.5
    assert torch.equal(after, torch.get_rng_state())  # no other draw
    assert 0 < chosen.sum() < 64
    assert torch.equal(out[chosen], torch.flip(x[chosen], dims=(-1,)))
    assert torch.equal(out[~chosen], x[~chosen])


def test_training_pipeline_flip_is_random_horizontal_flip_drawn_on_the_modules_device():
    """BatchAugment's flip is `random_horizontal_flip`, drawn on the module's device."""
    x = images(3)
    torch.manual_seed(0)
    out = BatchAugment(MEAN[3], STD[3], train=True, hflip=True)(x)
    torch.manual_seed(0)
    expected = normalised(random_horizontal_flip(x, 0.5, torch.device("cpu")), MEAN[3], STD[3])
    assert torch.equal(out, expected)


def test_batch_augment_imports_and_flips_without_kornia():
    """kornia is no dependency: the module imports, and a flipping pipeline runs, where kornia cannot load."""
    script = (
        "import sys\nsys.modules['kornia'] = None\n"
        "import torch\nfrom convinit.data.augmentation.batch_augment import BatchAugment\n"
        "x = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)\n"
        "print(tuple(BatchAugment((0.5,) * 3, (0.25,) * 3, train=True, hflip=True)(x).shape))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(4, 3, 8, 8)"


def test_crop_with_padding_changes_images_and_each_output_is_a_shift_of_the_padded_input():
    torch.manual_seed(0)
    pad = 2
    x = images(3)
    out = BatchAugment(MEAN[3], STD[3], train=True, crop_padding=pad)(x)
    padded = torch.nn.functional.pad(x.float() / 255, (pad,) * 4)  # zero (black) padding
    padded = (padded - torch.tensor(MEAN[3]).view(1, 3, 1, 1)) / torch.tensor(STD[3]).view(1, 3, 1, 1)
    shifts = []
    for o, p in zip(out, padded, strict=True):
        matches = [(dy, dx) for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)
                   if torch.allclose(o, p[:, dy : dy + 8, dx : dx + 8], atol=1e-5)]  # fmt: skip
        assert matches, "an output is not a crop of the padded input"
        shifts.append(matches[0])
    assert len(set(shifts)) > 1 and set(shifts) != {(pad, pad)}


def test_crop_pipeline_serves_consecutive_batches_of_different_sizes():
    torch.manual_seed(0)
    augment = BatchAugment(MEAN[3], STD[3], train=True, crop_padding=2)
    for size in (8, 8, 12, 8):  # the crop is rebuilt when the image size changes
        assert augment(images(3, size=size)).shape == (16, 3, size, size)


def test_randaugment_changes_images_and_keeps_pixels_in_range():
    torch.manual_seed(0)
    x = images(3)
    out = BatchAugment(MEAN[3], STD[3], train=True, randaugment_n=2, randaugment_m=9)(x)
    assert not torch.allclose(out, normalised(x, MEAN[3], STD[3]))
    pixels = out * torch.tensor(STD[3]).view(1, 3, 1, 1) + torch.tensor(MEAN[3]).view(1, 3, 1, 1)
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5


def test_random_erasing_fills_a_rectangle_with_noise_and_leaves_the_rest():
    torch.manual_seed(0)
    x = images(3, size=16)
    plain = normalised(x, MEAN[3], STD[3])
    out = BatchAugment(MEAN[3], STD[3], train=True, random_erasing=1.0)(x)
    assert not torch.allclose(out, plain)
    for o, p in zip(out, plain, strict=True):
        changed = ~torch.isclose(o, p).all(dim=0)  # (H, W)
        if changed.any():
            rows, cols = changed.any(dim=1).nonzero().flatten(), changed.any(dim=0).nonzero().flatten()
            box = (slice(int(rows.min()), int(rows.max()) + 1), slice(int(cols.min()), int(cols.max()) + 1))
            assert changed[box].all()  # one rectangle of per-pixel noise (timm's re_mode='pixel')
            assert torch.allclose(o[:, ~changed], p[:, ~changed])


@pytest.mark.parametrize("train", [False, True])
def test_out_size_resizes_the_batch(train):
    x = torch.full((4, 3, 8, 8), 128, dtype=torch.uint8)
    out = BatchAugment(MEAN[3], STD[3], out_size=(16, 12), train=train)(x)
    assert out.shape == (4, 3, 16, 12)
    assert torch.allclose(out, normalised(torch.full((4, 3, 16, 12), 128), MEAN[3], STD[3]), atol=1e-5)


def distinct_labels(batch: int = 8) -> torch.Tensor:
    return torch.arange(batch) % 10  # neighbours (the rolled partners) always differ


def test_mixup_cutmix_returns_soft_targets_summing_to_one():
    torch.manual_seed(0)
    mix = MixupCutmix(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0)
    assert mix.active
    x, y = normalised(images(3, batch=8), MEAN[3], STD[3]), distinct_labels()
    for _ in range(6):
        out, targets = mix(x, y)
        assert out.shape == x.shape and targets.shape == (8, 10)
        assert (targets >= 0).all() and torch.allclose(targets.sum(dim=1), torch.ones(8))
        # the mass sits on the sample's own label and its partner's (the batch rolled by one)
        own, partner = targets[torch.arange(8), y], targets[torch.arange(8), y.roll(1)]
        assert torch.allclose(own + partner, torch.ones(8))


def test_mixup_blends_each_image_with_its_partner_by_the_target_weight():
    torch.manual_seed(0)
    x, y = normalised(images(3, batch=8), MEAN[3], STD[3]), distinct_labels()
    out, targets = MixupCutmix(num_classes=10, mixup_alpha=0.8)(x, y)
    lam = targets[0, y[0]]
    assert torch.allclose(out, lam * x + (1 - lam) * x.roll(1, 0), atol=1e-5)


def test_cutmix_pastes_a_partner_box_whose_area_is_the_partner_weight():
    torch.manual_seed(1)
    x, y = normalised(images(3, batch=8, size=16), MEAN[3], STD[3]), distinct_labels()
    out, targets = MixupCutmix(num_classes=10, cutmix_alpha=1.0)(x, y)
    from_partner = torch.isclose(out, x.roll(1, 0)).all(dim=1) & ~torch.isclose(out, x).all(dim=1)
    from_self = torch.isclose(out, x).all(dim=1)
    assert (from_partner | from_self).all()  # every pixel comes from one of the two images
    partner_share = from_partner.float().mean(dim=(1, 2))
    assert torch.allclose(partner_share, targets[torch.arange(8), y.roll(1)], atol=1e-6)


def test_mixup_cutmix_is_identity_when_inactive():
    mix = MixupCutmix(num_classes=10)
    x, y = images(3), distinct_labels(16)
    out, targets = mix(x, y)
    assert not mix.active
    assert out is x and targets is y
