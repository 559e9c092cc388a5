"""Batch augmentation on the training device (kornia), per sample, with no per-image Python.

Training pipeline: uint8 -> float [0, 1] -> optional resize -> random crop with padding -> horizontal
flip -> RandAugment(n, m) -> normalise by the dataset's mean/std -> random erasing; then mixup/cutmix on
the batch. Evaluation: uint8 -> float -> optional resize -> normalise.

kornia's RandAugment draws one set of operations per call; we call it on 8 chunks of each batch so a
batch mixes several operation sets, and draw a magnitude per chunk from N(m, mstd) (timm's `mstd`).
Mixup and cutmix use torchvision's batch transforms (one lambda per batch, as in timm and DeiT).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

RANDAUGMENT_CHUNKS = 8


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
    ):
        super().__init__()
        import kornia.augmentation as K
        from kornia.augmentation.auto import RandAugment

        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.out_size = tuple(out_size) if out_size else None
        self.train_mode = train
        self.crop, self.crop_size = None, None
        self.flip = K.RandomHorizontalFlip() if train and hflip else None
        self.crop_padding = crop_padding if train else 0
        self.randaugment = (
            RandAugment(n=randaugment_n, m=randaugment_m) if train and randaugment_n > 0 else None
        )
        self.randaugment_m = randaugment_m
        self.randaugment_mstd = randaugment_mstd
        self.erasing = K.RandomErasing(p=random_erasing) if train and random_erasing > 0 else None

    def random_crop(self, x: torch.Tensor) -> torch.Tensor:
        size = tuple(x.shape[-2:])
        if self.crop is None or self.crop_size != size:  # built on first use: the input size is known then
            import kornia.augmentation as K

            self.crop, self.crop_size = K.RandomCrop(size, padding=self.crop_padding), size
        return self.crop(x)

    def rand_augment(self, x: torch.Tensor) -> torch.Tensor:
        gray = x.shape[1] == 1
        if gray:  # kornia's colour operations need 3 channels
            x = x.expand(-1, 3, -1, -1)
        chunks = []
        for chunk in x.chunk(RANDAUGMENT_CHUNKS):
            if self.randaugment_mstd > 0:
                m = self.randaugment_m + self.randaugment_mstd * float(torch.randn(()))
                self.randaugment.m = min(max(m, 0.5), 29.5)
            chunks.append(self.randaugment(chunk))
        x = torch.cat(chunks).clamp_(0, 1)
        return x.mean(dim=1, keepdim=True) if gray else x

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float().div_(255)
        if self.out_size and tuple(x.shape[-2:]) != self.out_size:
            x = F.interpolate(x, size=self.out_size, mode="bilinear", antialias=True, align_corners=False)
        if self.crop_padding > 0:
            x = self.random_crop(x)
        if self.flip is not None:
            x = self.flip(x)
        if self.randaugment is not None:
            x = self.rand_augment(x)
        x = (x - self.mean) / self.std
        if self.erasing is not None:
            x = self.erasing(x)
        return x


class MixupCutmix:
    """Mixup (Beta(alpha_mix)) or cutmix (Beta(alpha_cut)), one of them per batch, on soft targets."""

    def __init__(self, num_classes: int, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0):
        from torchvision.transforms import v2

        choices = []
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
