"""The batched random resized crop (`batch_augment.random_resized_crop`) against torchvision's
RandomResizedCrop: the same distribution of boxes, and each box resampled as a crop then a resize."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchvision.transforms import RandomResizedCrop

from convinit.data.augmentation import batch_augment
from convinit.data.augmentation.batch_augment import CROP_RATIO, random_resized_crop, resized_crop_boxes

SAMPLES = 6000


@pytest.mark.parametrize(
    ("h", "w", "scale"), [(24, 32, (0.08, 1.0)), (16, 16, (0.5, 1.0)), (8, 40, (0.9, 1.0))]
)
def test_boxes_follow_torchvisions_distribution_fallback_included(h, w, scale):
    """Mean and spread of each box coordinate, and the share of fallback boxes, as torchvision draws them
    (the 8x40 image with a large area mostly falls back: no ratio in 3/4-4/3 fits it)."""
    torch.manual_seed(0)
    ours = torch.stack(resized_crop_boxes(SAMPLES, h, w, scale, torch.device("cpu")), dim=1)
    image = torch.empty(1, h, w)
    theirs = torch.tensor(
        [RandomResizedCrop.get_params(image, list(scale), list(CROP_RATIO)) for _ in range(SAMPLES)],
        dtype=torch.float32,
    )  # (top, left, height, width) rows
    torch.testing.assert_close(ours.mean(0), theirs.mean(0), atol=0.15, rtol=0.02)
    torch.testing.assert_close(ours.std(0), theirs.std(0), atol=0.15, rtol=0.05)
    whole = lambda boxes: (boxes[:, 2:] == boxes[:, 2:].max(0).values).all(1).float().mean()  # noqa: E731
    assert abs(whole(ours) - whole(theirs)) < 0.02


def test_every_box_lies_inside_the_image_with_an_allowed_ratio_or_is_the_fallback():
    top, left, height, width = resized_crop_boxes(5000, 20, 30, (0.08, 1.0), torch.device("cpu"))
    assert (top >= 0).all() and (left >= 0).all() and (height >= 1).all() and (width >= 1).all()
    assert (top + height <= 20).all() and (left + width <= 30).all()
    assert (top == top.round()).all() and (left == left.round()).all()


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_a_box_at_the_output_size_is_cut_exactly(mode, monkeypatch):
    """A box as large as the output samples pixel centres: the crop itself, to float precision."""
    x = torch.rand(3, 2, 16, 16)
    box = [torch.tensor(v, dtype=torch.float32) for v in ([4.0, 0, 7], [4.0, 8, 1], [8.0] * 3, [8.0] * 3)]
    monkeypatch.setattr(batch_augment, "resized_crop_boxes", lambda *args: box)
    out = random_resized_crop(x, (8, 8), (0.08, 1.0), mode)
    for i, (t, left) in enumerate(zip([4, 0, 7], [4, 8, 1], strict=True)):
        torch.testing.assert_close(out[i], x[i, :, t : t + 8, left : left + 8], atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_the_whole_image_resized_is_torchs_interpolate(mode, monkeypatch):
    """A box covering the image, enlarged: `interpolate` (align_corners=False), edges included."""
    x = torch.rand(2, 3, 12, 10)
    full = [torch.zeros(2), torch.zeros(2), torch.full((2,), 12.0), torch.full((2,), 10.0)]
    monkeypatch.setattr(batch_augment, "resized_crop_boxes", lambda *args: full)
    out = random_resized_crop(x, (24, 17), (0.08, 1.0), mode)
    expected = F.interpolate(x, size=(24, 17), mode=mode, align_corners=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
