"""Spatial filter banks and their convolution matrices (docs/method.md §1 and §3).

Shared by the ConvMixer filter modes and the impulse initialisation of attention. A k x k filter
`w` acts on an s x s (or rows x cols) patch grid as conv2d does (cross-correlation, zero padding k//2):

    out[i, j] = sum_{a, b} w[a, b] * x[i + a - k//2, j + b - k//2].

Flattening the grid rows first (the order `patchify` uses), that is one N x N matrix M with
out = M @ x; `conv_matrix` builds it. For an impulse filter (one tap at (a, b)) M is the 0/1 matrix
T[q, key] = 1 iff key = q + (a - k//2, b - k//2) inside the grid: every row is a one-hot softmax
attention row (or all zero at the border), which is why an attention map can be a convolution.
Offsets are (dy, dx) pairs, rows then columns, relative to the kernel centre.
"""

from __future__ import annotations

import math

import torch

from convinit.errors import ConfigError

Offset = tuple[int, int]
Grid = tuple[int, int]


def check_kernel_size(kernel_size: int) -> int:
    """Odd positive kernel sizes only: an even kernel has no centre tap, so 'same' padding is lopsided.
    A boolean is no size (true would be a 1 x 1 kernel)."""
    if (
        not isinstance(kernel_size, int)
        or isinstance(kernel_size, bool)
        or kernel_size < 1
        or kernel_size % 2 == 0
    ):
        raise ConfigError(f"kernel_size must be an odd positive integer (3, 5, 7, ...), got {kernel_size!r}")
    return kernel_size


def check_kernel_fits(kernel_size: int, grid: Grid, what: str = "kernel_size") -> int:
    """A k x k kernel whose taps can reach the grid: at most 2 * side - 1 on a side-token grid, beyond
    which the outer taps point outside the grid from every token (all-zero maps). Checked before the
    kernel's k * k offsets are listed, which for k = 1000001 would be 10^12 of them."""
    largest = 2 * max(grid) - 1
    if check_kernel_size(kernel_size) > largest:
        raise ConfigError(
            f"{what}={kernel_size} is larger than the {grid[0]}x{grid[1]} token grid allows (at most "
            f"{largest}: a larger kernel's outer taps point outside the grid from every token); "
            "use a smaller odd kernel_size"
        )
    return kernel_size


def kernel_offsets(kernel_size: int) -> list[Offset]:
    """All (dy, dx) offsets of a k x k kernel in raster order (tap (a, b) -> (a - k//2, b - k//2))."""
    half = check_kernel_size(kernel_size) // 2
    return [(a - half, b - half) for a in range(kernel_size) for b in range(kernel_size)]


def centre_first_offsets(kernel_size: int) -> list[Offset]:
    """The kernel's offsets ordered centre first, then by distance from the centre, ties in raster order.

    The follow-up paper's deterministic order (docs/method.md §3); cycle it with index layer*heads + head
    so that every offset is used across layers (docs/method.md §7).
    """
    return sorted(kernel_offsets(kernel_size), key=lambda o: (o[0] ** 2 + o[1] ** 2, o[0], o[1]))


def offset_to_tap(offset: Offset, kernel_size: int) -> tuple[int, int]:
    """The (a, b) tap of a k x k kernel that an offset names."""
    half = kernel_size // 2
    return offset[0] + half, offset[1] + half


def random_offsets(count: int, kernel_size: int, generator: torch.Generator | None = None) -> list[Offset]:
    """`count` offsets drawn uniformly (with replacement) from the k*k taps, identity included (paper 1)."""
    offsets = kernel_offsets(kernel_size)
    picks = torch.randint(len(offsets), (count,), generator=generator)
    return [offsets[int(i)] for i in picks]


# ---------------------------------------------------------------------------------------------------
# Single k x k filters


def impulse_filter(kernel_size: int, offset: Offset | None = None, generator: torch.Generator | None = None):
    """One tap = 1 at `offset` (uniformly random if None), the rest 0. Shape (k, k)."""
    if offset is None:
        offset = random_offsets(1, kernel_size, generator)[0]
    filt = torch.zeros(kernel_size, kernel_size)
    filt[offset_to_tap(offset, kernel_size)] = 1.0
    return filt


def box_filter(kernel_size: int, taps: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """`taps` distinct random taps = 1 (docs/method.md §1 `box-n`); taps = k*k is the all-ones filter."""
    k2 = check_kernel_size(kernel_size) ** 2
    if not 1 <= taps <= k2:
        raise ConfigError(f"box filter needs 1 <= n <= {k2} taps for kernel_size {kernel_size}, got {taps}")
    filt = torch.zeros(k2)
    filt[torch.randperm(k2, generator=generator)[:taps]] = 1.0
    return filt.reshape(kernel_size, kernel_size)


def ones_filter(kernel_size: int) -> torch.Tensor:
    """The all-ones filter (box-n with n = k*k): every channel gets the same, linearly dependent filter."""
    return torch.ones(check_kernel_size(kernel_size), kernel_size)


def gaussian_filter(
    kernel_size: int, variance: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """w = exp(-0.5 * dist^2 / variance) around a uniformly random centre tap (appendix, Table 6).

    Small variance tends to an impulse; large variance to a flat (box) filter.
    """
    if not variance > 0:
        raise ConfigError(f"gaussian filter variance must be > 0, got {variance!r}")
    centre = offset_to_tap(random_offsets(1, kernel_size, generator)[0], kernel_size)
    a, b = torch.meshgrid(torch.arange(kernel_size), torch.arange(kernel_size), indexing="ij")
    dist2 = (a - centre[0]) ** 2 + (b - centre[1]) ** 2
    return torch.exp(-0.5 * dist2.double() / variance).float()


def default_random_filter(kernel_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """PyTorch's default depthwise Conv2d init: U(-1/k, 1/k) (kaiming_uniform, a = sqrt(5), fan_in k*k)."""
    bound = 1.0 / check_kernel_size(kernel_size)
    return (torch.rand(kernel_size, kernel_size, generator=generator) * 2 - 1) * bound


# ---------------------------------------------------------------------------------------------------
# Filter banks: `heads` distinct filters shared out over channels


ASSIGNMENTS = ("balanced", "random")


def assign_heads(
    channels: int, heads: int, assignment: str = "balanced", generator: torch.Generator | None = None
) -> torch.Tensor:
    """Which of the min(heads, channels) filters each channel uses, shape (C,).

    "balanced" (convinit's default): channel c -> c mod heads, so each filter has about channels/heads
    copies, as the appendix describes. "random": each channel draws its filter uniformly, with
    replacement, as the official code does (a filter may then have few copies, or none).
    """
    if heads < 1:
        raise ConfigError(f"filter heads must be a positive integer, got {heads}")
    if assignment not in ASSIGNMENTS:
        raise ConfigError(f"filter assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")
    if assignment == "random":
        return torch.randint(min(heads, channels), (channels,), generator=generator)
    return torch.arange(channels) % min(heads, channels)


def filter_bank(
    kind: str,
    kernel_size: int,
    channels: int,
    heads: int | None = None,
    *,
    taps: int | None = None,
    variance: float | None = None,
    generator: torch.Generator | None = None,
    assignment: str = "balanced",
) -> torch.Tensor:
    """(channels, k, k) filters of one kind: `heads` independent draws shared out by `assign_heads`.

    kind: impulse | box (needs `taps`) | ones | gaussian (needs `variance`) | random (default init).
    Filters are returned unscaled; `fixed_filter_scale` gives the official output-variance scale.
    """
    heads = channels if heads is None else heads
    draws = min(heads, channels)
    makers = {
        "impulse": lambda: impulse_filter(kernel_size, generator=generator),
        "box": lambda: box_filter(kernel_size, int(taps or 0), generator),
        "ones": lambda: ones_filter(kernel_size),
        "gaussian": lambda: gaussian_filter(kernel_size, float(variance or 0.0), generator),
        "random": lambda: default_random_filter(kernel_size, generator),
    }
    if kind not in makers:
        raise ConfigError(f"unknown filter kind {kind!r}; choose one of: {', '.join(makers)}")
    distinct = torch.stack([makers[kind]() for _ in range(draws)])  # (heads, k, k)
    return distinct[assign_heads(channels, heads, assignment, generator)]  # (C, k, k)


def fixed_filter_scale(filt: torch.Tensor, kernel_size: int) -> float:
    """Scale making ||w||^2 = 1/k, so unit-variance inputs give output variance 1/k: convinit's rule for
    the `standard` ConvMixer block (impulse * sqrt(1/k), box-n * sqrt(1/(n*k)), Gaussians the same).

    Not the official code's: that hard-codes 3 whatever k is (impulse * sqrt(1/3), box-n * sqrt(1/(3n));
    docs/method.md §1), which the `paper1` block uses (`PAPER1_SCALE` in `convinit.models.convmixer`).
    """
    return math.sqrt(1.0 / kernel_size) / float(filt.norm())


# ---------------------------------------------------------------------------------------------------
# Convolution matrices and their inverse view


def grid_pair(grid: int | Grid) -> Grid:
    return (grid, grid) if isinstance(grid, int) else (int(grid[0]), int(grid[1]))


def grid_coords(grid: int | Grid) -> torch.Tensor:
    """(N, 2) integer (row, col) of each patch, rows first."""
    rows, cols = grid_pair(grid)
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.stack((r.flatten(), c.flatten()), dim=1)


def conv_matrix(filt: torch.Tensor, grid: int | Grid) -> torch.Tensor:
    """The N x N matrix M with M @ x == conv2d(x on the grid, filt, padding=k//2) (cross-correlation).

    M[q, key] = filt[key_row - q_row + k//2, key_col - q_col + k//2] where that tap exists, else 0.
    """
    kernel_size = check_kernel_size(filt.shape[-1])
    coords = grid_coords(grid)
    delta = coords[None, :, :] - coords[:, None, :] + kernel_size // 2  # (N, N, 2): tap of key for query
    inside = ((delta >= 0) & (delta < kernel_size)).all(dim=-1)
    taps = delta.clamp(0, kernel_size - 1)
    return torch.where(inside, filt[taps[..., 0], taps[..., 1]], torch.zeros((), dtype=filt.dtype))


def impulse_conv_matrix(offset: Offset, grid: int | Grid) -> torch.Tensor:
    """T[q, key] = 1 iff key = q + offset inside the grid (rows that fall outside are all 0). (N, N)"""
    coords = grid_coords(grid)
    rows, cols = grid_pair(grid)
    target = coords + torch.tensor(offset)
    inside = (target[:, 0] >= 0) & (target[:, 0] < rows) & (target[:, 1] >= 0) & (target[:, 1] < cols)
    matrix = torch.zeros(len(coords), len(coords))
    index = target[:, 0] * cols + target[:, 1]
    matrix[inside.nonzero().flatten(), index[inside]] = 1.0
    return matrix


def target_keys(offset: Offset, grid: int | Grid) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query, the key index `offset` points to and whether it is inside the grid: (N,), (N,)."""
    rows, cols = grid_pair(grid)
    target = grid_coords(grid) + torch.tensor(offset)
    inside = (target[:, 0] >= 0) & (target[:, 0] < rows) & (target[:, 1] >= 0) & (target[:, 1] < cols)
    index = target[:, 0].clamp(0, rows - 1) * cols + target[:, 1].clamp(0, cols - 1)
    return index, inside


def row_offsets(maps: torch.Tensor, grid: int | Grid) -> torch.Tensor:
    """The inverse view: the (dy, dx) offset each attention row's largest weight points to.

    maps (..., N, N) -> (..., N, 2) integer offsets (key position minus query position).
    """
    coords = grid_coords(grid).to(maps.device)
    keys = maps.argmax(dim=-1)  # (..., N)
    return coords[keys] - coords  # (..., N, 2)
