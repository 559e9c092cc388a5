"""RandAugment on a whole batch on the device, each sample its own operations, with timm's definitions.

DeiT's `rand-m9-mstd0.5-inc1` (timm `auto_augment.py`, SPEC section 5) means, for every image: draw 2 of
the 15 "increasing" operations (with replacement); apply each with probability 0.5, at magnitude
N(9, 0.5) clipped to [0, 10] on timm's 0-10 scale (m 9: rotations up to +-27 degrees); signed
operations flip their sign with probability 0.5; geometric ones fill with the dataset mean.
kornia's RandAugment, used before, reads m on a 0-30 scale, always applies the chosen operations and
draws them once per call, and timm's own works on one PIL image at a time: this module is written by
hand to apply timm's definitions per sample to a batch: each operation runs once (one resampling for all
geometric ones). On the CPU it runs on the samples that drew it; on an accelerator on the whole batch,
kept where drawn (`torch.where`), so that nothing waits on the host.
Pixel operations work on the 0-255 grid as PIL's do; tests compare each one with timm's PIL
implementation.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_MAGNITUDE = 10.0  # timm's _LEVEL_DENOM: m is read on a 0-10 scale
GEOMETRIC_OPS = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
PIXEL_OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "PosterizeIncreasing",
    "SolarizeIncreasing",
    "SolarizeAdd",
    "ColorIncreasing",
    "ContrastIncreasing",
    "BrightnessIncreasing",
    "SharpnessIncreasing",
)
# timm's _RAND_INCREASING_TRANSFORMS, in its order
TIMM_INCREASING_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
    "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
    "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)  # fmt: skip


def per_sample(values: torch.Tensor) -> torch.Tensor:
    return values.view(-1, 1, 1, 1)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """PIL's "L" conversion (ITU-R 601-2 luma) of (B, C, H, W) in [0, 255]; grey images are their own."""
    if x.shape[1] == 1:
        return x
    weights = torch.tensor([0.299, 0.587, 0.114], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * weights).sum(dim=1, keepdim=True).round()


def blend(degenerate: torch.Tensor, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's Image.blend as ImageEnhance uses it: degenerate + factor * (image - degenerate), clipped to
    [0, 255] and truncated to an integer."""
    return (degenerate + per_sample(factor) * (x - degenerate)).clamp(0, 255).floor()


def auto_contrast(x: torch.Tensor) -> torch.Tensor:
    """ImageOps.autocontrast: stretch each channel's [min, max] to [0, 255]."""
    lo, hi = x.amin(dim=(2, 3), keepdim=True), x.amax(dim=(2, 3), keepdim=True)
    scale = torch.where(hi > lo, 255 / (hi - lo).clamp_min(1e-6), torch.ones_like(hi))
    offset = torch.where(hi > lo, lo, torch.zeros_like(lo))
    return ((x - offset) * scale).floor().clamp(0, 255)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """ImageOps.equalize, per image and channel: PIL's histogram lookup table, batched."""
    b, c, h, w = x.shape
    values = x.reshape(b * c, h * w).long()
    hist = torch.zeros(b * c, 256, device=x.device, dtype=torch.long).scatter_add_(
        1, values, torch.ones_like(values)
    )
    last = hist.gather(1, (hist > 0).long().cumsum(1).argmax(1, keepdim=True))  # count of the top value
    step = (h * w - last) // 255
    before = hist.cumsum(1) - hist  # pixels below each value
    lut = ((step // 2 + before) // step.clamp_min(1)).clamp(max=255)
    lut = torch.where(step > 0, lut, torch.arange(256, device=x.device).expand_as(lut))
    return lut.gather(1, values).reshape(b, c, h, w).to(x.dtype)


def sharpness_degenerate(x: torch.Tensor) -> torch.Tensor:
    """ImageFilter.SMOOTH (3x3 kernel 1,1,1 / 1,5,1 / 1,1,1 over 13), border pixels unchanged, as PIL."""
    kernel = torch.ones(3, 3, device=x.device, dtype=x.dtype)
    kernel[1, 1] = 5
    kernel = (kernel / 13).expand(x.shape[1], 1, 3, 3)
    smooth = F.conv2d(x, kernel, groups=x.shape[1]).round()
    out = x.clone()
    out[..., 1:-1, 1:-1] = smooth
    return out


def pixel_op(name: str, x: torch.Tensor, level: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """timm's pixel operation `name` at `level` = magnitude / 10 (per sample), on [0, 255] images."""
    if name == "AutoContrast":
        return auto_contrast(x)
    if name == "Equalize":
        return equalize(x)
    if name == "Invert":
        return 255 - x
    if name == "PosterizeIncreasing":  # keep 4 - int(4 level) high bits
        drop = per_sample(2 ** (4 + (level * 4).floor()))
        return (x / drop).floor() * drop
    if name == "SolarizeIncreasing":  # invert pixels >= 256 - int(256 level)
        threshold = per_sample(256 - (level * 256).floor().clamp(max=256))
        return torch.where(x >= threshold, 255 - x, x)
    if name == "SolarizeAdd":  # add int(110 level) to pixels below 128
        add = per_sample((level * 110).floor().clamp(max=128))
        return torch.where(x < 128, (x + add).clamp(max=255), x)
    factor = (1 + sign * level * 0.9).clamp_min(0.1)  # the "increasing" enhancements
    if name == "ColorIncreasing":
        return blend(grayscale(x), x, factor)
    if name == "ContrastIncreasing":
        mean = (grayscale(x).mean(dim=(1, 2, 3), keepdim=True) + 0.5).floor()
        return blend(mean, x, factor)
    if name == "BrightnessIncreasing":
        return blend(torch.zeros_like(x), x, factor)
    if name == "SharpnessIncreasing":
        return blend(sharpness_degenerate(x), x, factor)
    raise ValueError(f"unknown RandAugment operation {name!r}")


def affine_matrix(
    name: str, level: torch.Tensor, sign: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """(B, 2, 3) maps of output pixel coordinates to input ones, as PIL's Image.transform / rotate take."""
    b = level.shape[0]
    m = torch.zeros(b, 2, 3, device=level.device, dtype=level.dtype)
    m[:, 0, 0] = m[:, 1, 1] = 1
    value = sign * level
    if name == "ShearX":
        m[:, 0, 1] = value * 0.3
    elif name == "ShearY":
        m[:, 1, 0] = value * 0.3
    elif name == "TranslateXRel":
        m[:, 0, 2] = value * 0.45 * width
    elif name == "TranslateYRel":
        m[:, 1, 2] = value * 0.45 * height
    elif name == "Rotate":  # Image.rotate(degrees): counter-clockwise about the centre
        angle = -torch.deg2rad(value * 30)
        cos, sin = torch.cos(angle), torch.sin(angle)
        cx, cy = width / 2, height / 2
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, sin, -sin, cos
        m[:, 0, 2] = cx - cos * cx - sin * cy
        m[:, 1, 2] = cy + sin * cx - cos * cy
    else:
        raise ValueError(f"unknown geometric operation {name!r}")
    return m


def warp(x: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Resample (B, C, H, W) at matrix @ (pixel centre), bicubic, as PIL's Image.transform does: a pixel
    whose source falls outside the image takes `fill`, one inside interpolates with edge values.

    torch's bicubic kernel uses a = -0.75 and PIL's a = -0.5: pixels differ by a few levels out of 255.
    """
    b, c, h, w = x.shape
    ys, xs = torch.meshgrid(
        torch.arange(h, device=x.device, dtype=x.dtype) + 0.5,
        torch.arange(w, device=x.device, dtype=x.dtype) + 0.5,
        indexing="ij",
    )
    centres = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1).view(1, h * w, 3)
    source = (centres @ matrix.transpose(1, 2)).view(b, h, w, 2)  # input coordinates (x, y)
    sx, sy = source[..., 0].unsqueeze(1), source[..., 1].unsqueeze(1)
    inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)  # (B, 1, H, W)
    grid = source / torch.tensor([w / 2, h / 2], device=x.device, dtype=x.dtype) - 1
    sampled = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)
    return torch.where(inside, sampled, fill.view(1, -1, 1, 1)).clamp(0, 255)


class BatchRandAugment(nn.Module):
    """timm's RandAugment (`rand-m{m}-n{n}-mstd{mstd}-inc1`) per sample on a (B, C, H, W) batch in [0, 1]."""

    def __init__(
        self, num_ops: int = 2, magnitude: float = 9.0, magnitude_std: float = 0.5, prob: float = 0.5,
        fill: tuple[float, ...] = (0.5,), ops: tuple[str, ...] = TIMM_INCREASING_OPS,
    ):  # fmt: skip
        super().__init__()
        if not 0 <= magnitude <= MAX_MAGNITUDE:
            raise ValueError(f"RandAugment magnitude must be in [0, 10] (timm's scale), got {magnitude}")
        self.num_ops, self.magnitude, self.magnitude_std, self.prob, self.ops = (
            num_ops, magnitude, magnitude_std, prob, ops,
        )  # fmt: skip
        # timm fills with the dataset mean rounded to 0-255 (transforms_factory: img_mean)
        self.register_buffer("fill", torch.tensor([min(255, round(255 * v)) for v in fill]), persistent=False)

    def draw(self, b: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Per sample: which op, whether it applies, its level (magnitude / 10) and its sign."""
        op = torch.randint(len(self.ops), (b,), device=device)
        applies = torch.rand(b, device=device) < self.prob
        magnitude = torch.full((b,), float(self.magnitude), device=device)
        if self.magnitude_std > 0:
            magnitude = magnitude + self.magnitude_std * torch.randn(b, device=device)
        level = magnitude.clamp(0, MAX_MAGNITUDE) / MAX_MAGNITUDE
        sign = torch.where(torch.rand(b, device=device) > 0.5, -1.0, 1.0)
        return op, applies, level, sign

    def one_op(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        op, applies, level, sign = self.draw(b, x.device)
        matrix = torch.eye(2, 3, device=x.device, dtype=x.dtype).repeat(b, 1, 1)
        for index, name in enumerate(self.ops):
            if name in GEOMETRIC_OPS:
                chosen = (applies & (op == index)).view(-1, 1, 1)
                matrix = torch.where(chosen, affine_matrix(name, level, sign, h, w), matrix)
        geometric = torch.tensor([name in GEOMETRIC_OPS for name in self.ops], device=x.device)
        masks = [(applies & geometric[op], None)]
        masks += [(applies & (op == i), name) for i, name in enumerate(self.ops) if name in PIXEL_OPS]
        apply = self.apply_on_selected if x.device.type == "cpu" else self.apply_everywhere
        out = x.clone()
        for chosen, name in masks:  # name None: one resampling for every geometric operation
            if name is None:
                op_fn = lambda v, m, lv, sg: warp(v, m, self.fill.to(x.dtype)).round()  # noqa: E731
            else:
                op_fn = lambda v, m, lv, sg, name=name: pixel_op(name, v, lv, sg)  # noqa: E731
            out = apply(out, x, chosen, op_fn, matrix, level, sign)
        return out

    @staticmethod
    def apply_on_selected(out, x, chosen, op_fn, matrix, level, sign) -> torch.Tensor:
        """Run the operation on the samples that drew it (cheapest; finding them reads the device)."""
        index = chosen.nonzero().squeeze(1)
        if len(index):
            out[index] = op_fn(x[index], matrix[index], level[index], sign[index])
        return out

    @staticmethod
    def apply_everywhere(out, x, chosen, op_fn, matrix, level, sign) -> torch.Tensor:
        """Run the operation on the whole batch and keep it where drawn: nothing waits on the host."""
        return torch.where(per_sample(chosen), op_fn(x, matrix, level, sign), out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = (x * 255).round()  # PIL's operations act on the 0-255 grid
        for _ in range(self.num_ops):
            out = self.one_op(out)
        return out / 255


class TorchvisionRandAugment(nn.Module):
    """torchvision's `RandAugment(num_ops, magnitude)` per sample on a (B, C, H, W) batch in [0, 1].

    Paper 1's augmented recipe is torchvision's RandAugment(2, 14): magnitude bin 14 of 31 on a 0-30
    scale, every drawn operation applied, signed ones negated with probability 0.5, nearest
    interpolation, fill 0. Its magnitude is fixed, so each (operation, sign) is one parameter set: each
    is computed by torchvision's own operation for the whole batch and kept where a sample drew it.
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31):
        super().__init__()
        from torchvision.transforms import RandAugment

        if magnitude != int(magnitude) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"torchvision's RandAugment magnitude is a bin in [0, 30], got {magnitude}")
        self.reference = RandAugment(num_ops, int(magnitude), num_magnitude_bins)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torchvision.transforms.autoaugment import _apply_op  # the operations RandAugment applies

        b, _, h, w = x.shape
        images = (x * 255).round().to(torch.uint8)  # torchvision's uint8 operations, as on PIL images
        space = self.reference._augmentation_space(self.reference.num_magnitude_bins, (h, w))
        for _ in range(self.reference.num_ops):
            op = torch.randint(len(space), (b,), device=x.device)
            negate = torch.randint(2, (b,), device=x.device).bool()
            out = images
            for index, (name, (magnitudes, signed)) in enumerate(space.items()):
                value = float(magnitudes[self.reference.magnitude]) if magnitudes.ndim > 0 else 0.0
                for sign in (1.0, -1.0) if signed else (1.0,):
                    chosen = (op == index) & (negate == (sign < 0) if signed else True)
                    result = _apply_op(images, name, sign * value, self.reference.interpolation, None)
                    out = torch.where(per_sample(chosen), result, out)
            images = out
        return images.to(x.dtype) / 255
