"""Closed-form impulse factors that survive image content (docs/method.md §3 and §7).

The follow-up paper's closed form solves X Wq Wk^T X^T * scale = L (target logits) through a pseudo-
inverse of the position-only input X. On real images the layer sees X + E, E the image content; every
direction of X the fit keeps must carry more position than content, or content takes over the logits
(with the sin-cos P, its weakest directions are 10-20x weaker than LN(x): docs/method.md §7).

So the fit works in the metric of the content: with S the position-dependent mean of the Q/K input
(N, D) and C the covariance of what is left (D, D, per token), it whitens by C (Z = S C^-1/2), keeps
the directions whose signal-to-content ratio sigma_i^2 / N is at least `min_snr` (and above `rcond` of
the best, for conditioning), and solves the target there: M = W G W^T with W = C^-1/2 V_k and
G = sigma^-1 U_k^T L U_k sigma^-1 / scale. The rank-d factors of G give Wq, Wk. Without real images
S is the pseudo-input and C = content^2 * I (LN output has unit variance per dimension); with alpha
= 0 and no content this is the plain truncated pseudo-inverse.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from convinit.errors import ConfigError
from convinit.init.targets import Targets
from convinit.models.filters import Grid, grid_coords

RIDGE = 1e-6  # added to the content covariance, relative to the signal's power per dimension


@dataclass
class InputStatistics:
    """Position signal S (N, D) and content covariance C (D, D) of one layer's Q/K input, float64."""

    signal: torch.Tensor
    content: torch.Tensor

    @classmethod
    def of_batch(cls, x: torch.Tensor) -> InputStatistics:
        """From real Q/K inputs of the patch tokens, (B, N, D): mean over images and the rest's covariance."""
        x = x.double()
        signal = x.mean(0)  # (N, D)
        rest = (x - signal).reshape(-1, x.shape[-1])  # (B*N, D)
        return cls(signal, rest.T @ rest / len(rest))

    @classmethod
    def of_pseudo_input(cls, x: torch.Tensor, content: float) -> InputStatistics:
        """A position-only input (N, D) with isotropic content of std `content` per dimension."""
        x = x.double()
        return cls(x, content**2 * torch.eye(x.shape[1], dtype=torch.float64))


@dataclass
class SignalBasis:
    """Whitened signal directions kept by the fit: S W = U diag(sigma), W^T C W = I."""

    w: torch.Tensor  # (D, k)
    u: torch.Tensor  # (N, k)
    sigma: torch.Tensor  # (k,)

    @classmethod
    def of(cls, stats: InputStatistics, min_snr: float, rcond: float, floor: float) -> SignalBasis:
        """floor: variance added to the content in every direction, content that training may bring."""
        signal, content = stats.signal, stats.content
        dim = signal.shape[1]
        power = signal.pow(2).sum() / signal.numel()
        ridge = floor + RIDGE * float(power)
        evals, evecs = torch.linalg.eigh(content + ridge * torch.eye(dim, dtype=torch.float64))
        inv_root = evecs * evals.clamp_min(1e-300).rsqrt() @ evecs.T  # C^-1/2, symmetric (D, D)
        u, sigma, vh = torch.linalg.svd(signal @ inv_root, full_matrices=False)
        keep = (sigma.pow(2) / len(signal) >= min_snr) & (sigma > rcond * sigma[0])
        keep[0] = True  # at least the strongest direction
        return cls(inv_root @ vh[keep].T, u[:, keep], sigma[keep])


def closed_form_factors(
    basis: SignalBasis, targets: Targets, dim_head: int, scale: float, noise: float, generator
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Wq, Wk (H, D, d) with S Wq_h Wk_h^T S^T * scale ~ T_h (unit logit gap), and the rank used.

    Columns beyond the rank are left zero (the caller puts small noise there).
    """
    logits = targets.maps.double()
    if noise:
        off = torch.randn(logits.shape, generator=generator, dtype=torch.float64) * noise
        logits = logits + off * (1 - logits)
    inv = 1.0 / basis.sigma
    core = (basis.u.T @ logits @ basis.u) * inv[:, None] * inv[None, :] / scale  # (H, k, k)
    a, s, bh = torch.linalg.svd(core)
    rank = min(dim_head, len(basis.sigma))
    root = s[:, :rank].sqrt()[:, None, :]  # (H, 1, rank)
    heads, dim = len(targets.offsets), basis.w.shape[0]
    wq = torch.zeros(heads, dim, dim_head, dtype=torch.float64)
    wk = torch.zeros(heads, dim, dim_head, dtype=torch.float64)
    wq[..., :rank] = (basis.w @ a[..., :rank]) * root  # (D, k) @ (H, k, rank)
    wk[..., :rank] = (basis.w @ bh[:, :rank].transpose(1, 2)) * root
    return wq, wk, rank


def quadratic_factors(targets: Targets, grid: Grid, dim_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Model III closed form: Q_h (N, 3), K_h (3, N) with Q_h K_h = -||key - query - o_h||^2 + row const.

    -||k - q - o||^2 = 2 k.(q + o) - |k|^2 - |q + o|^2, and the last term is constant along a row.
    Coordinates are centred and each of the 3 columns is balanced between Q and K.
    """
    if dim_head < 3:
        raise ConfigError(
            f"the Model III closed form needs dim_head >= 3, got {dim_head}; use solver: optimize"
        )
    coords = grid_coords(grid).double()
    coords = coords - coords.mean(0)  # (N, 2) centred
    qs, ks = [], []
    for offset in targets.offsets:
        shifted = coords + torch.tensor(offset, dtype=torch.float64)
        q = torch.cat((2 * shifted, -torch.ones(len(coords), 1, dtype=torch.float64)), dim=1)  # (N, 3)
        k = torch.cat((coords, coords.pow(2).sum(1, keepdim=True)), dim=1)  # (N, 3)
        balance = (k.norm(dim=0) / q.norm(dim=0)).sqrt()
        qs.append(q * balance)
        ks.append(k / balance)
    return torch.stack(qs), torch.stack(ks)  # (H, N, 3) each
