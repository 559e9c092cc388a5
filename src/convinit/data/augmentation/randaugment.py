"""RandAugment on a whole batch on the device, each sample its own operations, with timm's definitions.

DeiT's `rand-m9-mstd0.5-inc1` (timm `auto_augment.py`, docs/method.md §5) means, for every image: draw 2 of
the 15 "increasing" operations (with replacement); apply each with probability 0.5, at magnitude
N(9, 0.5) clipped to [0, 10] on timm's 0-10 scale (m 9: rotations up to +-27 degrees); signed
operations flip their sign with probability 0.5; geometric ones fill with the dataset mean.
kornia's RandAugment reads m on a 0-30 scale, always applies the chosen operations and draws them once
per call, and timm's own works on one PIL image at a time: this module is written by hand to apply
timm's definitions per sample to a batch.

Two ways to run a round, with the same draws and the same result:
- per operation (`read_free=False`, the CPU's default): each operation runs on the samples that drew
  it; finding them reads the device, which costs nothing on the CPU.
- grouped by kind (`read_free=True`, every accelerator's default): no host read and a fixed amount of
  work whatever the draws. Eight of the ten pixel operations map each channel's value through a
  table (a LUT of 256 entries per sample and channel, built from a per-(image, channel) histogram), so
  they cost one gather for the whole batch; Color and Sharpness blend with a degenerate image (one
  blend); the five geometric ones are one `grid_sample`, the identity for samples that drew none.
Pixel operations work on the 0-255 grid as PIL's do; tests compare each one with timm's PIL
implementation, and the grouped round with the per-operation one.
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
BLEND_OPS = ("ColorIncreasing", "SharpnessIncreasing")  # blend with a degenerate image, pixel by pixel
LUT_OPS = tuple(name for name in PIXEL_OPS if name not in BLEND_OPS)  # a map of each channel's values
# timm's _RAND_INCREASING_TRANSFORMS, in its order
TIMM_INCREASING_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
    "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
    "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)  # fmt: skip
# PIL's "L" conversion in fixed point (Convert.c, L24): exact in float32, whatever the summation order
LUMA_FIXED_POINT = (19595, 38470, 7471)


def per_sample(values: torch.Tensor) -> torch.Tensor:
    return values.view(-1, 1, 1, 1)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """PIL's "L" conversion of (B, C, H, W) in [0, 255]: (19595 R + 38470 G + 7471 B + 2^15) >> 16, every
    partial sum an integer below 2^24 (exact in float32); grey images are their own."""
    if x.shape[1] == 1:
        return x
    r, g, b = LUMA_FIXED_POINT
    weighted = x[:, 0:1] * r + x[:, 1:2] * g + x[:, 2:3] * b + 32768
    return (weighted / 65536).floor()


def blend(degenerate: torch.Tensor, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's Image.blend as ImageEnhance uses it: degenerate + factor * (image - degenerate), clipped to
    [0, 255] and truncated to an integer."""
    return (degenerate + per_sample(factor) * (x - degenerate)).clamp(0, 255).floor()


def stretch(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """ImageOps.autocontrast's map: each channel's [lo, hi] (B, C, 1, 1) to [0, 255]; flat channels kept."""
    scale = torch.where(hi > lo, 255 / (hi - lo).clamp_min(1e-6), torch.ones_like(hi))
    offset = torch.where(hi > lo, lo, torch.zeros_like(lo))
    return ((x - offset) * scale).floor().clamp(0, 255)


def auto_contrast(x: torch.Tensor) -> torch.Tensor:
    """ImageOps.autocontrast: stretch each channel's [min, max] to [0, 255]."""
    return stretch(x, x.amin(dim=(2, 3), keepdim=True), x.amax(dim=(2, 3), keepdim=True))


def histogram(values: torch.Tensor) -> torch.Tensor:
    """(N, 256) counts of the integer values 0-255 of each row of (N, P) int64 `values`; a scatter-add
    (bincount would read its input's maximum back to the host)."""
    counts = torch.zeros(values.shape[0], 256, device=values.device, dtype=torch.long)
    return counts.scatter_add_(1, values, torch.ones_like(values))


def equalize_lut(hist: torch.Tensor) -> torch.Tensor:
    """ImageOps.equalize's lookup table (N, 256) from (N, 256) histograms (torchvision's is the same)."""
    total = hist.sum(1, keepdim=True)
    last = hist.gather(1, (hist > 0).long().cumsum(1).argmax(1, keepdim=True))  # count of the top value
    step = (total - last) // 255
    before = hist.cumsum(1) - hist  # pixels below each value
    lut = ((step // 2 + before) // step.clamp_min(1)).clamp(max=255)
    return torch.where(step > 0, lut, torch.arange(256, device=hist.device).expand_as(lut))


def equalize(x: torch.Tensor) -> torch.Tensor:
    """ImageOps.equalize, per image and channel: PIL's histogram lookup table, batched."""
    b, c, h, w = x.shape
    values = x.reshape(b * c, h * w).long()
    return equalize_lut(histogram(values)).gather(1, values).reshape(b, c, h, w).to(x.dtype)


def contrast_mean(gray: torch.Tensor) -> torch.Tensor:
    """ImageEnhance.Contrast's degenerate value from the "L" image (B, 1, H, W): int(its mean + 0.5), per
    sample, from an exact integer sum: floor((2 sum + n) / 2n)."""
    n = gray[0].numel()
    total = gray.long().sum(dim=(1, 2, 3), keepdim=True)
    return ((2 * total + n) // (2 * n)).to(gray.dtype)


def sharpness_degenerate(x: torch.Tensor) -> torch.Tensor:
    """ImageFilter.SMOOTH (3x3 kernel 1,1,1 / 1,5,1 / 1,1,1 over 13), border pixels unchanged, as PIL:
    round(S / 13) for the integer weighted sum S, which is never halfway (exact in any order)."""
    c = x.shape[1]
    box = F.conv2d(x, x.new_ones(c, 1, 3, 3), groups=c)  # sum of the 3x3 neighbourhood
    weighted = box + 4 * x[..., 1:-1, 1:-1]  # the centre counts 5 times
    out = x.clone()
    out[..., 1:-1, 1:-1] = (weighted / 13).round()
    return out


def enhance_factor(level: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """timm's "increasing" enhancement factor: 1 + sign * 0.9 level, at least 0.1."""
    return (1 + sign * level * 0.9).clamp_min(0.1)


def value_op(name: str, x: torch.Tensor, level: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """The LUT operations whose map does not depend on the image: a function of each value alone."""
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
    if name == "BrightnessIncreasing":
        return blend(torch.zeros_like(x), x, enhance_factor(level, sign))
    raise ValueError(f"unknown RandAugment operation {name!r}")


def pixel_op(name: str, x: torch.Tensor, level: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """timm's pixel operation `name` at `level` = magnitude / 10 (per sample), on [0, 255] images."""
    if name == "AutoContrast":
        return auto_contrast(x)
    if name == "Equalize":
        return equalize(x)
    factor = enhance_factor(level, sign)
    if name == "ColorIncreasing":
        return blend(grayscale(x), x, factor)
    if name == "ContrastIncreasing":
        return blend(contrast_mean(grayscale(x)), x, factor)
    if name == "SharpnessIncreasing":
        return blend(sharpness_degenerate(x), x, factor)
    return value_op(name, x, level, sign)


def affine_matrices(
    drawn: dict[str, torch.Tensor], level: torch.Tensor, sign: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """(B, 2, 3) maps of output pixel coordinates to input ones, as PIL's Image.transform / rotate take:
    each sample's geometric operation (`drawn`: name -> (B,) bool), the identity where it drew none."""
    no = torch.zeros_like(level, dtype=torch.bool)
    shear_x, shear_y, rotate = (drawn.get(name, no) for name in ("ShearX", "ShearY", "Rotate"))
    move_x, move_y = drawn.get("TranslateXRel", no), drawn.get("TranslateYRel", no)
    value = sign * level
    angle = -torch.deg2rad(value * 30)  # Image.rotate(degrees): counter-clockwise about the centre
    cos, sin = torch.cos(angle), torch.sin(angle)
    cx, cy = width / 2, height / 2
    a = e = torch.where(rotate, cos, 1.0)  # x' = a x + b y + c, y' = d x + e y + f
    b = torch.where(rotate, sin, torch.where(shear_x, value * 0.3, 0.0))
    d = torch.where(rotate, -sin, torch.where(shear_y, value * 0.3, 0.0))
    c = torch.where(rotate, cx - cos * cx - sin * cy, torch.where(move_x, value * 0.45 * width, 0.0))
    f = torch.where(rotate, cy + sin * cx - cos * cy, torch.where(move_y, value * 0.45 * height, 0.0))
    return torch.stack([a, b, c, d, e, f], dim=1).view(-1, 2, 3)


def affine_matrix(
    name: str, level: torch.Tensor, sign: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """(B, 2, 3): the geometric operation `name` for every sample."""
    if name not in GEOMETRIC_OPS:
        raise ValueError(f"unknown geometric operation {name!r}")
    return affine_matrices({name: torch.ones_like(level, dtype=torch.bool)}, level, sign, height, width)


def warp(x: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Resample (B, C, H, W) at matrix @ (pixel centre), bicubic, as PIL's Image.transform does: a pixel
    whose source falls outside the image takes `fill`, one inside interpolates with edge values.

    torch's bicubic kernel uses a = -0.75 and PIL's a = -0.5: pixels differ by a few levels out of 255.
    """
    b, c, h, w = x.shape
    ys = (torch.arange(h, device=x.device, dtype=x.dtype) + 0.5).view(1, h, 1)
    xs = (torch.arange(w, device=x.device, dtype=x.dtype) + 0.5).view(1, 1, w)
    m = matrix.view(b, 6, 1, 1).unbind(1)
    sx = m[0] * xs + m[1] * ys + m[2]  # (B, H, W) input coordinates, elementwise: the same in any batch
    sy = m[3] * xs + m[4] * ys + m[5]
    inside = ((sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)).unsqueeze(1)  # (B, 1, H, W)
    grid = torch.stack([sx / (w / 2) - 1, sy / (h / 2) - 1], dim=-1)  # (B, H, W, 2) in [-1, 1]
    sampled = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)
    return torch.where(inside, sampled, fill.view(1, -1, 1, 1)).clamp(0, 255)


class BatchRandAugment(nn.Module):
    """timm's RandAugment (`rand-m{m}-n{n}-mstd{mstd}-inc1`) per sample on a (B, C, H, W) batch in [0, 1].

    `read_free`: run each round grouped by kind, without host reads (True), or per operation on the
    samples that drew it (False); None chooses by device: per operation on the CPU, grouped elsewhere.
    """

    def __init__(
        self, num_ops: int = 2, magnitude: float = 9.0, magnitude_std: float = 0.5, prob: float = 0.5,
        fill: tuple[float, ...] = (0.5,), ops: tuple[str, ...] = TIMM_INCREASING_OPS,
        read_free: bool | None = None,
    ):  # fmt: skip
        super().__init__()
        if not 0 <= magnitude <= MAX_MAGNITUDE:
            raise ValueError(f"RandAugment magnitude must be in [0, 10] (timm's scale), got {magnitude}")
        unknown = [name for name in ops if name not in GEOMETRIC_OPS + PIXEL_OPS]
        if unknown:
            raise ValueError(f"unknown RandAugment operation {unknown[0]!r}")
        self.num_ops, self.magnitude, self.magnitude_std, self.prob, self.ops = (
            num_ops, magnitude, magnitude_std, prob, tuple(ops),
        )  # fmt: skip
        self.read_free = read_free
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

    def geometric_matrix(self, drawn: torch.Tensor, level: torch.Tensor, sign: torch.Tensor, h: int, w: int):
        """(B, 2, 3): each sample's geometric operation, the identity where it drew none."""
        chosen = {name: drawn == index for index, name in enumerate(self.ops) if name in GEOMETRIC_OPS}
        return affine_matrices(chosen, level, sign, h, w)

    def one_op(self, x: torch.Tensor) -> torch.Tensor:
        op, applies, level, sign = self.draw(x.shape[0], x.device)
        drawn = torch.where(applies, op, -1)  # (B,) the operation each sample applies, -1: none
        read_free = self.read_free if self.read_free is not None else x.device.type != "cpu"
        round_ = self.grouped_round if read_free else self.per_op_round
        return round_(x, drawn, level.to(x.dtype), sign.to(x.dtype))

    def per_op_round(self, x, drawn, level, sign) -> torch.Tensor:
        """Each operation on the samples that drew it (finding them reads the device)."""
        out = x.clone()
        geometric = [index for index, name in enumerate(self.ops) if name in GEOMETRIC_OPS]
        chosen = sum((drawn == index for index in geometric), torch.zeros_like(drawn, dtype=torch.bool))
        rows = chosen.nonzero().squeeze(1)
        if len(rows):  # one resampling for every geometric operation
            matrix = self.geometric_matrix(drawn[rows], level[rows], sign[rows], *x.shape[-2:])
            out[rows] = warp(x[rows], matrix, self.fill.to(x.dtype)).round()
        for index, name in enumerate(self.ops):
            rows = (drawn == index).nonzero().squeeze(1)
            if name in PIXEL_OPS and len(rows):
                out[rows] = pixel_op(name, x[rows], level[rows], sign[rows])
        return out

    def grouped_round(self, x, drawn, level, sign) -> torch.Tensor:
        """Every sample's operation in a fixed number of whole-batch passes, no host read: one LUT gather
        for the value maps, one blend for Color and Sharpness, one resampling for the geometric ones."""
        b, c, h, w = x.shape
        gray = grayscale(x)  # (B, 1, H, W), shared by Contrast and Color
        values = x.long().view(b * c, h * w)
        out = self.lut(x, values, gray, drawn, level, sign).gather(1, values).view(b, c, h, w).to(x.dtype)
        out = self.blend_with_degenerate(x, out, gray, drawn, level, sign)
        if any(name in GEOMETRIC_OPS for name in self.ops):
            out = warp(out, self.geometric_matrix(drawn, level, sign, h, w), self.fill.to(x.dtype)).round()
        return out

    def lut(self, x, values, gray, drawn, level, sign) -> torch.Tensor:
        """(B * C, 256) int64: each sample's value map, the identity where it drew no value operation."""
        b, c = x.shape[:2]
        every = torch.arange(256, device=x.device, dtype=x.dtype).view(1, 1, 1, 256).expand(b, 1, 1, 256)
        lut = every.expand(b, c, 1, 256)  # the values 0-255 as a (B, C, 1, 256) image
        hist = None
        for index, name in enumerate(self.ops):
            if name not in LUT_OPS:
                continue
            if name in ("AutoContrast", "Equalize") and hist is None:
                hist = histogram(values).view(b, c, 256)
            if name == "AutoContrast":
                present = (hist > 0).long()
                lo = present.argmax(2).view(b, c, 1, 1).to(x.dtype)  # the lowest value present
                hi = 255 - present.flip(2).argmax(2).view(b, c, 1, 1).to(x.dtype)
                table = stretch(every, lo, hi)
            elif name == "Equalize":
                table = equalize_lut(hist.view(b * c, 256)).view(b, c, 1, 256).to(x.dtype)
            elif name == "ContrastIncreasing":
                table = blend(contrast_mean(gray), every, enhance_factor(level, sign))
            else:
                table = value_op(name, every, level, sign)
            lut = torch.where(per_sample(drawn == index), table, lut)
        return lut.reshape(b * c, 256).long()

    def blend_with_degenerate(self, x, out, gray, drawn, level, sign) -> torch.Tensor:
        """Color and Sharpness: one blend with each sample's degenerate image."""
        degenerate, chosen = None, torch.zeros_like(drawn, dtype=torch.bool)
        for index, name in enumerate(self.ops):
            if name in BLEND_OPS:
                image = gray if name == "ColorIncreasing" else sharpness_degenerate(x)
                here = drawn == index
                degenerate = image if degenerate is None else torch.where(per_sample(here), image, degenerate)
                chosen = chosen | here
        if degenerate is None:
            return out
        return torch.where(per_sample(chosen), blend(degenerate, x, enhance_factor(level, sign)), out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = (x * 255).round()  # PIL's operations act on the 0-255 grid
        for _ in range(self.num_ops):
            out = self.one_op(out)
        return out / 255
