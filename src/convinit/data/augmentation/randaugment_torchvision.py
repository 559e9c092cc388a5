"""torchvision's RandAugment (paper 1's augmented recipe) per sample on a batch, with no host read.

Paper 1's recipe is torchvision's RandAugment(2, 14) (docs/method.md §6): magnitude bin 14 of 31 on a 0-30
scale, every drawn operation applied, signed ones negated with probability 0.5, nearest interpolation,
fill 0. torchvision applies it to one image at a time, and its equalize loops over images and channels
with `if` on tensors (two host reads per channel). Here every sample draws its own operation and a round
costs a fixed number of whole-batch passes: the magnitude is fixed, so each (operation, sign) is one row
of a parameter table; seven operations are value maps (one LUT gather, from one histogram per image and
channel), Color and Sharpness one blend with a degenerate image, the five geometric ones one
`grid_sample` (the identity where a sample drew none). Each operation follows torchvision's tensor code
expression by expression, so a batch equals torchvision's result image by image (tests check it).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.data.augmentation.randaugment import equalize_lut, histogram, per_sample, sharpness_degenerate
from convinit.system.torchvision_pair import import_torchvision

GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
BLENDED = ("Brightness", "Color", "Contrast", "Sharpness")  # torchvision's _blend(img, degenerate, 1 + m)


def inverse_affine(name: str, magnitude: float, h: int, w: int) -> list[float]:
    """The inverse affine matrix torchvision's `_apply_op` builds for a geometric operation (its
    `F.affine` / `F.rotate` arguments; centre [0, 0] for the shears is the top-left corner)."""
    import_torchvision("randaugment_policy=torchvision")
    from torchvision.transforms.functional import _get_inverse_affine_matrix

    corner = [-w * 0.5, -h * 0.5]  # F.affine's centre_f for center=[0, 0]
    if name == "ShearX":
        return _get_inverse_affine_matrix(
            corner, 0.0, [0.0, 0.0], 1.0, [math.degrees(math.atan(magnitude)), 0.0]
        )
    if name == "ShearY":
        return _get_inverse_affine_matrix(
            corner, 0.0, [0.0, 0.0], 1.0, [0.0, math.degrees(math.atan(magnitude))]
        )
    if name == "TranslateX":
        return _get_inverse_affine_matrix([0.0, 0.0], 0.0, [float(int(magnitude)), 0.0], 1.0, [0.0, 0.0])
    if name == "TranslateY":
        return _get_inverse_affine_matrix([0.0, 0.0], 0.0, [0.0, float(int(magnitude))], 1.0, [0.0, 0.0])
    if name == "Rotate":  # F.rotate passes -angle
        return _get_inverse_affine_matrix([0.0, 0.0], -magnitude, [0.0, 0.0], 1.0, [0.0, 0.0])
    return [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def base_grid(h: int, w: int, device: torch.device) -> torch.Tensor:
    """(1, H * W, 3) pixel centres as torchvision's `_gen_affine_grid` lays them out."""
    grid = torch.empty(1, h, w, 3, device=device)
    grid[..., 0].copy_(torch.linspace(-w * 0.5 + 0.5, w * 0.5 - 0.5, steps=w, device=device))
    grid[..., 1].copy_(torch.linspace(-h * 0.5 + 0.5, h * 0.5 - 0.5, steps=h, device=device).unsqueeze_(-1))
    grid[..., 2].fill_(1)
    return grid.view(1, h * w, 3)


def gray_level(images: torch.Tensor) -> torch.Tensor:
    """torchvision's rgb_to_grayscale of uint8 (B, C, H, W): (0.2989 R + 0.587 G + 0.114 B) truncated."""
    if images.shape[1] == 1:
        return images
    r, g, b = images.unbind(dim=1)
    return (0.2989 * r + 0.587 * g + 0.114 * b).to(images.dtype).unsqueeze(1)


class TorchvisionRandAugment(nn.Module):
    """torchvision's `RandAugment(num_ops, magnitude)` per sample on a (B, C, H, W) batch in [0, 1]."""

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31):
        super().__init__()
        from torchvision.transforms import RandAugment

        if magnitude != int(magnitude) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"torchvision's RandAugment magnitude is a bin in [0, 30], got {magnitude}")
        self.reference = RandAugment(num_ops, int(magnitude), num_magnitude_bins)
        self.names = list(self.reference._augmentation_space(num_magnitude_bins, (32, 32)))
        self.tables: dict[tuple, dict[str, torch.Tensor]] = {}  # per (H, W, device), made once

    def table(self, h: int, w: int, device: torch.device) -> dict[str, torch.Tensor]:
        """Per (operation, sign) row 2 * op + negated: the parameters torchvision computes in Python for
        that magnitude, made once per image size and copied to the device once."""
        key = (h, w, device)
        if key not in self.tables:
            space = self.reference._augmentation_space(self.reference.num_magnitude_bins, (h, w))
            rows = {name: [] for name in ("ratio", "keep", "mask", "threshold", "theta")}
            for name, (magnitudes, signed) in space.items():
                value = float(magnitudes[self.reference.magnitude]) if magnitudes.ndim > 0 else 0.0
                for negated in (False, True):
                    magnitude = -value if signed and negated else value
                    rows["ratio"].append(1.0 + magnitude)  # the enhancement factor
                    rows["keep"].append(1.0 - (1.0 + magnitude))  # _blend's (1.0 - ratio), in double
                    bits = int(magnitude) if name == "Posterize" else 8
                    rows["mask"].append(-int(2 ** (8 - bits)) % 256)  # posterize's img & mask
                    rows["threshold"].append(magnitude)  # solarize's
                    rows["theta"].append(inverse_affine(name, magnitude, h, w))
            theta = torch.tensor(rows["theta"]).view(-1, 2, 3).transpose(1, 2)
            table = {
                "ratio": torch.tensor(rows["ratio"]),
                "keep": torch.tensor(rows["keep"]),
                "mask": torch.tensor(rows["mask"], dtype=torch.uint8),
                "threshold": torch.tensor(rows["threshold"]),
                "theta": theta / torch.tensor([0.5 * w, 0.5 * h]),  # (rows, 3, 2), as _gen_affine_grid
            }
            self.tables[key] = {k: v.to(device) for k, v in table.items()} | {"grid": base_grid(h, w, device)}
        return self.tables[key]

    def draw(self, b: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sample: its operation (an index into torchvision's augmentation space), whether negated."""
        op = torch.randint(len(self.names), (b,), device=device)
        negate = torch.randint(2, (b,), device=device)
        return op, negate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        images = (x * 255).round().to(torch.uint8)  # torchvision's uint8 operations, as on PIL images
        table = self.table(h, w, x.device)
        for _ in range(self.reference.num_ops):
            op, negate = self.draw(b, x.device)
            images = self.one_round(images, op, op * 2 + negate, table)
        return images.to(x.dtype) / 255

    def chosen(self, op: torch.Tensor, name: str) -> torch.Tensor:
        return per_sample(op == self.names.index(name))

    def one_round(self, images, op, row, table) -> torch.Tensor:
        """Each sample's operation: value maps, then blends with an image, then one resampling."""
        b, c, h, w = images.shape
        values = images.long().view(b * c, h * w)
        ratio, keep = per_sample(table["ratio"][row]), per_sample(table["keep"][row])
        out = self.lut(images, values, op, row, table).gather(1, values).view(b, c, h, w)
        smooth = sharpness_degenerate(images.float()).to(torch.uint8) if min(h, w) > 2 else images
        sharp = self.chosen(op, "Sharpness") & (min(h, w) > 2)
        colour = self.chosen(op, "Color") & (c == 3)  # torchvision leaves grey images unchanged
        degenerate = torch.where(sharp, smooth, gray_level(images))
        blended = (ratio * images + keep * degenerate).clamp(0, 255).to(torch.uint8)
        out = torch.where(sharp | colour, blended, out)
        grid = table["grid"].expand(b, -1, -1).bmm(table["theta"][row]).view(b, h, w, 2)
        warped = F.grid_sample(out.float(), grid, mode="nearest", padding_mode="zeros", align_corners=False)
        return warped.round().to(torch.uint8)

    def lut(self, images, values, op, row, table) -> torch.Tensor:
        """(B * C, 256) int64: each sample's map of values (the identity for the other operations)."""
        b, c = images.shape[:2]
        every = torch.arange(256, device=images.device, dtype=torch.uint8).view(1, 1, 1, 256)
        hist = histogram(values).view(b, c, 256)
        ratio, keep = per_sample(table["ratio"][row]), per_sample(table["keep"][row])
        mean = gray_level(images).float().mean(dim=(1, 2, 3), keepdim=True)
        present = (hist > 0).long()
        minimum = present.argmax(2).view(b, c, 1, 1).float()
        maximum = (255 - present.flip(2).argmax(2)).view(b, c, 1, 1).float()
        scale = 255 / (maximum - minimum)
        flat = scale.isfinite().logical_not()
        minimum, scale = torch.where(flat, 0.0, minimum), torch.where(flat, 1.0, scale)
        tables = {
            "Brightness": (ratio * every + keep * torch.zeros_like(every)).clamp(0, 255).to(torch.uint8),
            "Contrast": (ratio * every + keep * mean).clamp(0, 255).to(torch.uint8),
            "Posterize": every & per_sample(table["mask"][row]),
            "Solarize": torch.where(every >= per_sample(table["threshold"][row]), 255 - every, every),
            "AutoContrast": ((every - minimum) * scale).clamp(0, 255).to(torch.uint8),
            "Equalize": equalize_lut(hist.view(b * c, 256)).view(b, c, 1, 256).to(torch.uint8),
        }
        lut = every.expand(b, c, 1, 256)
        for name, mapped in tables.items():
            lut = torch.where(self.chosen(op, name), mapped, lut)
        return lut.reshape(b * c, 256).long()
