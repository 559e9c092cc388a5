"""Batch augmentation on the training device, per sample, with no per-image Python.

Training pipeline: uint8 -> float [0, 1] -> optional resize -> random crop with padding (by hand,
drawn on the device) or random resized crop (one `grid_sample`, boxes drawn on the device) -> horizontal
flip -> RandAugment ->
normalise by the dataset's mean/std -> random erasing; then mixup/cutmix on the batch. Evaluation:
uint8 -> float -> optional resize -> normalise.

RandAugment follows the definitions a preset names (`randaugment_policy`): timm's (DeiT's recipe: m on a
0-10 scale, each operation applied with probability 0.5, magnitude noise `mstd`) or torchvision's
(paper 1's RandAugment(2, 14): a magnitude bin on a 0-30 scale); each sample draws its own operations
(`data/augmentation/randaugment.py`). Random erasing is timm's with per-pixel random values
(`re_mode='pixel'`).
Mixup and cutmix use torchvision's batch transforms (one lambda per batch, as in timm and DeiT).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.data.augmentation.randaugment import BatchRandAugment
from convinit.data.augmentation.randaugment_torchvision import TorchvisionRandAugment
from convinit.system.torchvision_pair import import_torchvision

RANDAUGMENT_POLICIES = ("timm", "torchvision")
# timm's RandomErasing defaults, as DeiT uses them: area 2 %-33 %, aspect ratio 0.3-3.3, 10 attempts.
ERASE_AREA = (0.02, 1 / 3)
ERASE_LOG_RATIO = (math.log(0.3), math.log(1 / 0.3))
ERASE_ATTEMPTS = 10
# torchvision's RandomResizedCrop: aspect ratio 3/4-4/3 drawn log-uniformly, 10 attempts, then a fallback.
CROP_RATIO = (3 / 4, 4 / 3)
CROP_ATTEMPTS = 10


def random_erasing(x: torch.Tensor, prob: float) -> torch.Tensor:
    """timm's RandomErasing(prob, mode='pixel') on a normalised batch, every sample drawn on the device.

    As timm: with probability `prob`, up to 10 attempts draw an area fraction and a log-uniform aspect
    ratio; the first box that fits is filled with N(0, 1) noise per pixel and channel.
    """
    b, _, h, w = x.shape
    erase = torch.rand(b, device=x.device) < prob
    area = torch.empty(b, ERASE_ATTEMPTS, device=x.device).uniform_(*ERASE_AREA) * (h * w)
    ratio = torch.empty(b, ERASE_ATTEMPTS, device=x.device).uniform_(*ERASE_LOG_RATIO).exp()
    heights, widths = (area * ratio).sqrt().round(), (area / ratio).sqrt().round()
    fits = (heights < h) & (widths < w)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits, as timm's loop takes
    height, width = heights.gather(1, first).squeeze(1), widths.gather(1, first).squeeze(1)
    erase = erase & fits.any(dim=1)
    top = (torch.rand(b, device=x.device) * (h - height + 1)).floor()
    left = (torch.rand(b, device=x.device) * (w - width + 1)).floor()
    rows = torch.arange(h, device=x.device).view(1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, 1, w)
    inside = (rows >= top.view(-1, 1, 1)) & (rows < (top + height).view(-1, 1, 1))
    inside = inside & (cols >= left.view(-1, 1, 1)) & (cols < (left + width).view(-1, 1, 1))
    box = (inside & erase.view(-1, 1, 1)).unsqueeze(1)  # (B, 1, H, W)
    return torch.where(box, torch.randn_like(x), x)


def random_horizontal_flip(x: torch.Tensor, prob: float, draw_device: torch.device) -> torch.Tensor:
    """Mirrors each sample along its width with probability `prob`. Written to draw exactly as kornia's
    RandomHorizontalFlip (0.9), which it replaces: one `torch.rand(B)` on the module's device, compared with
    `prob`, so that a seeded run's batches stay the same."""
    chosen = torch.rand(x.shape[0], device=draw_device) < prob
    chosen = chosen.to(x.device, non_blocking=True).view(-1, *[1] * (x.dim() - 1))
    return torch.where(chosen, x.flip(-1), x)


def padded_random_crop(x: torch.Tensor, padding: int) -> torch.Tensor:
    """torchvision's RandomCrop(size, padding) per sample: zero padding, then the crop at an offset drawn
    uniformly in [0, 2 padding] on each axis. Drawn on the batch's device and cut by two gathers:
    kornia's RandomCrop draws on the CPU and copies five parameter tensors to the device each batch."""
    b, c, h, w = x.shape
    padded = F.pad(x, (padding,) * 4)  # (B, C, H + 2p, W + 2p)
    top, left = torch.randint(0, 2 * padding + 1, (2, b, 1, 1, 1), device=x.device)
    rows = top + torch.arange(h, device=x.device).view(1, 1, h, 1)  # (B, 1, H, 1)
    cols = left + torch.arange(w, device=x.device).view(1, 1, 1, w)  # (B, 1, 1, W)
    out = padded.gather(2, rows.expand(b, c, h, w + 2 * padding))  # (B, C, H, W + 2p)
    return out.gather(3, cols.expand(b, c, h, w))


def resized_crop_boxes(
    b: int, h: int, w: int, scale: tuple[float, float], device: torch.device
) -> tuple[torch.Tensor, ...]:
    """(top, left, height, width), each (B,), of torchvision's `RandomResizedCrop.get_params` per sample,
    its loop drawn at once: 10 attempts of an area fraction in `scale` and a log-uniform aspect ratio, the
    first whose rounded box fits is taken at a uniform offset; where none fits, torchvision's fallback (the
    whole image cut to the nearest allowed ratio, centred)."""
    area = torch.empty(b, CROP_ATTEMPTS, device=device).uniform_(*scale) * (h * w)
    ratio = torch.empty(b, CROP_ATTEMPTS, device=device).uniform_(*map(math.log, CROP_RATIO)).exp()
    widths, heights = (area * ratio).sqrt().round(), (area / ratio).sqrt().round()
    fits = (widths > 0) & (widths <= w) & (heights > 0) & (heights <= h)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits, as torchvision's loop
    width, height = widths.gather(1, first).squeeze(1), heights.gather(1, first).squeeze(1)
    if w / h < CROP_RATIO[0]:  # fallback box: known on the host, from the image's shape alone
        fallback = (w, round(w / CROP_RATIO[0]))
    elif w / h > CROP_RATIO[1]:
        fallback = (round(h * CROP_RATIO[1]), h)
    else:
        fallback = (w, h)
    none = ~fits.any(dim=1)
    width = torch.where(none, float(fallback[0]), width)
    height = torch.where(none, float(fallback[1]), height)
    top = torch.where(
        none, float((h - fallback[1]) // 2), (torch.rand(b, device=device) * (h - height + 1)).floor()
    )
    left = torch.where(
        none, float((w - fallback[0]) // 2), (torch.rand(b, device=device) * (w - width + 1)).floor()
    )
    return top, left, height, width


def random_resized_crop(
    x: torch.Tensor, size: tuple[int, int], scale: tuple[float, float], mode: str = "bicubic"
) -> torch.Tensor:
    """torchvision's RandomResizedCrop(size, scale, ratio 3/4-4/3) of every sample in one `grid_sample`:
    each sample's box (`resized_crop_boxes`) becomes an affine map of the output grid onto the box, so the
    work launched does not grow with the batch. It differs from a crop then `interpolate` only in the
    resampling (no antialiasing when a box shrinks; taps at a box's edge read the pixels beyond it)."""
    b, c, h, w = x.shape
    top, left, height, width = resized_crop_boxes(b, h, w, scale, x.device)
    zero = torch.zeros_like(top)
    # output coordinate u in [-1, 1] (align_corners=False) -> input: u * width / w + box centre
    theta = torch.stack(
        [width / w, zero, (2 * left + width) / w - 1, zero, height / h, (2 * top + height) / h - 1], dim=1
    ).view(b, 2, 3)
    grid = F.affine_grid(theta, [b, c, *size], align_corners=False)  # (B, H', W', 2)
    return F.grid_sample(x, grid, mode=mode, padding_mode="border", align_corners=False)


def rand_augment(policy: str, n: int, m: float, mstd: float, mean: tuple[float, ...]) -> nn.Module:
    """RandAugment with `policy`'s definitions: timm's (m in [0, 10]) or torchvision's (a bin in [0, 30])."""
    if policy == "timm":
        return BatchRandAugment(n, m, mstd, prob=0.5, fill=mean)
    if policy == "torchvision":
        return TorchvisionRandAugment(n, int(m))
    raise ValueError(f"randaugment_policy must be one of {', '.join(RANDAUGMENT_POLICIES)}, got {policy!r}")


class BatchAugment(nn.Module):
    """uint8 (B, C, H, W) batch -> normalised float batch, augmented when `train=True`."""

    def __init__(
        self,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        out_size: tuple[int, int] | None = None,
        train: bool = False,
        crop_padding: int = 0,
        hflip: bool = False,
        randaugment_n: int = 0,
        randaugment_m: float = 9.0,
        randaugment_mstd: float = 0.0,
        random_erasing: float = 0.0,
        randaugment_policy: str = "timm",
        resized_crop_scale: float | None = None,
    ):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.out_size = tuple(out_size) if out_size else None
        self.train_mode = train
        self.hflip = train and hflip
        self.crop_padding = crop_padding if train else 0
        self.resized_crop_scale = resized_crop_scale if train else None
        self.randaugment = None
        if train and randaugment_n > 0:
            self.randaugment = rand_augment(
                randaugment_policy, randaugment_n, randaugment_m, randaugment_mstd, mean
            )
        self.random_erasing = random_erasing if train else 0.0

    def random_crop(self, x: torch.Tensor) -> torch.Tensor:
        return padded_random_crop(x, self.crop_padding)

    def random_resized_crop(self, x: torch.Tensor) -> torch.Tensor:
        """DeiT's RandomResizedCrop (area scale [s, 1], aspect ratio 3/4-4/3, bicubic), per sample."""
        size = self.out_size or tuple(x.shape[-2:])
        return random_resized_crop(x, size, (self.resized_crop_scale, 1.0)).clamp_(0, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float().div_(255)
        if self.resized_crop_scale:
            x = self.random_resized_crop(x)
        elif self.out_size and tuple(x.shape[-2:]) != self.out_size:
            x = F.interpolate(x, size=self.out_size, mode="bilinear", antialias=True, align_corners=False)
        if self.crop_padding > 0:
            x = self.random_crop(x)
        if self.hflip:  # drawn on the module's device (where `.to` put it), as kornia's flip drew
            x = random_horizontal_flip(x, 0.5, self.mean.device)
        if self.randaugment is not None:
            x = self.randaugment(x)
        x = (x - self.mean) / self.std
        if self.random_erasing > 0:
            x = random_erasing(x, self.random_erasing)
        return x


class MixupCutmix:
    """Mixup (Beta(alpha_mix)) or cutmix (Beta(alpha_cut)), one of them per batch, on soft targets."""

    def __init__(self, num_classes: int, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0):
        choices = []
        if mixup_alpha > 0 or cutmix_alpha > 0:  # torchvision only when it is used
            import_torchvision("mixup and cutmix")
            from torchvision.transforms import v2
        if mixup_alpha > 0:
            choices.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
        if cutmix_alpha > 0:
            choices.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
        self.transform = v2.RandomChoice(choices) if len(choices) > 1 else (choices[0] if choices else None)
        self.num_classes = num_classes

    @property
    def active(self) -> bool:
        return self.transform is not None

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns images and targets: class indices when inactive, (B, classes) probabilities when active."""
        if self.transform is None:
            return images, labels
        return self.transform(images, labels)
