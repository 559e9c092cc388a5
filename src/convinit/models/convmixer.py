"""ConvMixer with fixed spatial filters (paper 1, Fig. 4 and appendix Table 6; docs/method.md §1).

Stem: Conv(p x p, stride p) -> GELU -> BN. Head: global average pool -> Linear. Two blocks (`block`):

- `standard` (Trockman & Kolter): x = x + BN(GELU(spatial(x))); x = BN(GELU(Conv1x1(x))). Fixed filters
  are scaled to squared norm 1/k and only their weights are frozen (the per-channel bias trains).
- `paper1`, as the official code that made paper 1's figures: in the conv format no GELU after the
  depthwise conv, x = x + BN(spatial(x)) (a linear spatial step, as the theory assumes); the linear
  format (perm / fullperm) keeps it. Fixed means weight and bias frozen. Scales hard-code 3: impulse
  x sqrt(1/3), box-n x sqrt(1/(3n)), Gaussians normalised so the bank's mean squared norm is 1/3,
  perm x sqrt(1/3).

The spatial (depthwise) step is what the experiments vary:

- `learned`: the default depthwise conv, trained (plain ConvMixer); with `filter_heads` H below the width,
  H trained filters shared out over the channels (`SharedFilterConv`: Table 6's construction, trained).
- `random`: the default init, frozen.
- `impulse`: one tap = 1 at a uniformly random kernel position, frozen.
- `box-N`: N distinct random taps = 1 (`box-{k*k}`, alias `ones`, is the all-ones filter), frozen.
- `gaussian-V`: exp(-0.5 dist^2 / V) around a random centre tap, V a variance, frozen.
- `softmax`: random weights (the default init) passed through a softmax over the k*k taps in the
  forward pass, frozen: a random positive filter summing to 1.
- `perm` / `fullperm`: no convolution at all, an N x N token-mixing matrix per channel: each row picks
  one random column (`perm`) or a true permutation (`fullperm`). Meant for small N.

perm rows carry the impulse scale and their bias starts U(+-1/C) (the official code's). `filter_heads`
distinct filters are shared out over the channels: `filter_assignment` "balanced" (channel c uses filter
c mod heads; default) or "random" (uniform with replacement, the official code; the paper-1 presets);
`share_filters_across_layers` reuses one bank in every block.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.models.filters import assign_heads, check_kernel_size, filter_bank, fixed_filter_scale
from convinit.models.layers import check_positive, patch_grid
from convinit.models.pretrained import PretrainedMixin
from convinit.models.registry import FAMILIES, Family

SPATIAL_MODES = "learned, random, impulse, ones, box-N, gaussian-V, softmax, perm, fullperm"
BLOCKS = ("standard", "paper1")
PAPER1_SCALE = math.sqrt(1.0 / 3.0)  # the official code's hard-coded 3, whatever k is


def parse_spatial(spatial: str, kernel_size: int) -> tuple[str, dict]:
    """'box-3' -> ('box', {'taps': 3}), 'gaussian-0.5' -> ('gaussian', {'variance': 0.5}), ..."""
    text = str(spatial).strip().lower()
    if text in ("learned", "random", "impulse", "softmax", "perm", "fullperm"):
        return text, {}
    if text == "ones":
        return "box", {"taps": kernel_size * kernel_size}
    if match := re.fullmatch(r"box-(\d+)", text):
        taps = int(match.group(1))
        if not 1 <= taps <= kernel_size**2:
            raise ConfigError(
                f"spatial {spatial!r}: box-N needs 1 <= N <= {kernel_size**2} for kernel_size {kernel_size}"
            )
        return "box", {"taps": taps}
    if match := re.fullmatch(r"gaussian-([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)", text):
        variance = float(match.group(1))
        if variance <= 0:
            raise ConfigError(f"spatial {spatial!r}: the Gaussian variance must be > 0 (e.g. gaussian-0.5)")
        return "gaussian", {"variance": variance}
    raise ConfigError(
        f"unknown spatial mode {spatial!r}; choose one of: {SPATIAL_MODES} (e.g. box-3, gaussian-0.5)"
    )


class TokenMixing(nn.Module):
    """Fixed per-channel N x N selection matrices (the `perm` / `fullperm` controls), plus a bias.

    Each selection matrix has one 1 per row, so it is stored as the column index each row picks and
    applied with a gather; `matrices()` gives the explicit (heads, N, N) 0/1 matrices.
    """

    def __init__(
        self,
        dim: int,
        grid: tuple[int, int],
        heads: int,
        full: bool,
        scale: float,
        assignment: str = "balanced",
    ):
        super().__init__()
        tokens = grid[0] * grid[1]
        if full:
            picks = torch.stack([torch.randperm(tokens) for _ in range(min(heads, dim))])
        else:
            picks = torch.randint(tokens, (min(heads, dim), tokens))
        self.register_buffer("picks", picks)  # (heads, N): column chosen by each row
        self.register_buffer("head_of_channel", assign_heads(dim, heads, assignment))  # (C,)
        self.scale = scale
        self.bias = nn.Parameter(torch.empty(dim).uniform_(-1.0 / dim, 1.0 / dim))  # U(+-1/C), as official

    def matrices(self) -> torch.Tensor:
        """The explicit selection matrices, (heads, N, N), unscaled."""
        eye = torch.eye(self.picks.shape[1], device=self.picks.device)
        return eye[self.picks]  # row n of head h is e_{picks[h, n]}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        flat = x.flatten(2)  # (B, C, N)
        index = self.picks[self.head_of_channel].expand(batch, -1, -1)  # (B, C, N)
        out = torch.gather(flat, 2, index) * self.scale
        return out.reshape(batch, channels, height, width) + self.bias[:, None, None]


class SharedFilterConv(nn.Module):
    """A trained depthwise conv with `heads` distinct filters shared out over the channels.

    Paper 1's Table 6 construction, trained instead of frozen (docs/method.md §1.3): one parameter
    `filters` (heads, 1, k, k), expanded to the channels' (C, 1, k, k) bank in the forward pass by
    `head_of_channel` (the rules of `assign_heads`), so a channel group's gradients sum into its one
    filter. Weights trained per layer: heads * k * k spatial weights plus the C per-channel biases (not
    C * k * k). Initialised as nn.Conv2d's default depthwise conv (kaiming uniform, a = sqrt(5), fan-in k*k).
    """

    def __init__(self, dim: int, kernel_size: int, heads: int, assignment: str = "balanced"):
        super().__init__()
        self.padding = kernel_size // 2
        self.filters = nn.Parameter(torch.empty(min(heads, dim), 1, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(dim))
        self.register_buffer("head_of_channel", assign_heads(dim, heads, assignment))  # (C,)
        if not self.filters.is_meta:  # meta: shapes only, no values
            nn.init.kaiming_uniform_(self.filters, a=math.sqrt(5))
            nn.init.uniform_(self.bias, -1.0 / kernel_size, 1.0 / kernel_size)

    @property
    def weight(self) -> torch.Tensor:
        """The (C, 1, k, k) depthwise bank the layer applies: channel c's row is filter head_of_channel[c]."""
        return self.filters[self.head_of_channel]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias, padding=self.padding, groups=x.shape[1])


class SoftmaxConv(nn.Conv2d):
    """Depthwise conv whose filters are softmax(weights) over the k*k taps (the official `softmax` mode)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.flatten(1).softmax(-1).reshape(self.weight.shape)  # (C, 1, k, k)
        return self._conv_forward(x, weight, self.bias)


def scaled_bank(
    mode: str, params: dict, dim: int, kernel_size: int, heads: int, paper1: bool, assignment: str
) -> torch.Tensor:
    """The fixed filters (C, k, k) at the block's scale (see the module docstring)."""
    bank = filter_bank(mode, kernel_size, dim, heads, assignment=assignment, **params)
    if not paper1:
        return bank * torch.tensor([fixed_filter_scale(f, kernel_size) for f in bank])[:, None, None]
    if mode == "gaussian":  # the bank's mean squared norm is 1/3
        return bank / (bank.flatten(1).pow(2).sum(1).mean() * 3).sqrt()
    return bank * (PAPER1_SCALE / bank.flatten(1).norm(dim=1))[:, None, None]  # impulse, box-n, ones


def spatial_layer(
    mode: str,
    params: dict,
    dim: int,
    kernel_size: int,
    grid: tuple[int, int],
    heads: int,
    paper1: bool,
    assignment: str = "balanced",
) -> nn.Module:
    """One block's spatial step for an already-parsed mode; fixed modes frozen (paper1: bias too).

    `learned` with `heads` at least `dim` is the ordinary per-channel conv, whatever the assignment."""
    if mode in ("perm", "fullperm"):
        scale = PAPER1_SCALE if paper1 else math.sqrt(1.0 / kernel_size)
        layer = TokenMixing(dim, grid, heads, full=mode == "fullperm", scale=scale, assignment=assignment)
    elif mode == "learned" and heads < dim:  # fewer trained filters than channels (Table 6, trained)
        return SharedFilterConv(dim, kernel_size, heads, assignment)
    else:
        kind = SoftmaxConv if mode == "softmax" else nn.Conv2d
        layer = kind(dim, dim, kernel_size, groups=dim, padding=kernel_size // 2)
        if mode == "learned":
            return layer
        if mode not in ("random", "softmax") and not layer.weight.is_meta:  # meta: shapes only, no values
            with torch.no_grad():
                bank = scaled_bank(mode, params, dim, kernel_size, heads, paper1, assignment)
                layer.weight.copy_(bank[:, None])
        layer.weight.requires_grad_(False)
    if paper1:
        layer.bias.requires_grad_(False)
    return layer


class Residual(nn.Module):
    def __init__(self, fn: nn.Module):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fn(x)


class ConvMixer(PretrainedMixin, nn.Module):
    """ConvMixer (Trockman & Kolter) with the fixed spatial filter modes of paper 1 (docs/method.md §1)."""

    def __init__(
        self,
        *,
        num_classes: int,
        img_size: int | tuple[int, int],
        in_chans: int,
        dim: int,
        depth: int,
        kernel_size: int,
        patch_size: int,
        spatial: str = "learned",
        filter_heads: int | None = None,
        share_filters_across_layers: bool = False,
        block: str = "standard",
        filter_assignment: str = "balanced",
    ):
        super().__init__()
        if block not in BLOCKS:
            raise ConfigError(f"ConvMixer block must be one of {', '.join(BLOCKS)}, got {block!r}")
        check_positive(dim=dim, depth=depth)
        check_kernel_size(kernel_size)
        heads = dim if filter_heads is None else filter_heads
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ConfigError(
                f"filter_heads must be a positive integer (or null for one filter per channel), got {heads!r}"
            )
        self.grid = patch_grid(img_size, patch_size)
        self.spatial = spatial
        self.block = block
        paper1 = block == "paper1"
        mode, params = parse_spatial(spatial, kernel_size)
        # paper 1's conv format has no GELU after the depthwise conv; its linear format (perm) has it
        spatial_act = nn.Identity if paper1 and mode not in ("perm", "fullperm") else nn.GELU
        self.stem = nn.Sequential(
            nn.Conv2d(in_chans, dim, patch_size, stride=patch_size), nn.GELU(), nn.BatchNorm2d(dim)
        )
        layer_args = (mode, params, dim, kernel_size, self.grid, heads, paper1, filter_assignment)
        first = spatial_layer(*layer_args)
        blocks = []
        for index in range(depth):
            spatial_mix = first if index == 0 else spatial_layer(*layer_args)
            if share_filters_across_layers and index > 0:
                spatial_mix.load_state_dict(first.state_dict())  # the same fixed filters (own parameters)
            blocks.append(
                nn.Sequential(
                    Residual(nn.Sequential(spatial_mix, spatial_act(), nn.BatchNorm2d(dim))),
                    nn.Conv2d(dim, dim, 1),
                    nn.GELU(),
                    nn.BatchNorm2d(dim),
                )
            )
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(dim, num_classes)

    def spatial_layers(self) -> list[nn.Module]:
        """Each block's spatial step (depthwise conv or TokenMixing), first to last."""
        return [block[0].fn[0] for block in self.blocks]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(images))  # (B, D, rows, cols)
        return self.head(self.pool(x).flatten(1))


# a ConvMixer preset lets its caller set every argument (the spatial modes are options, not presets)
FAMILIES.add("convmixer", Family(ConvMixer))
