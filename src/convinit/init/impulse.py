"""Impulse initialisation: attention maps that start as random impulse convolutions (SPEC section 3).

Each head h of each layer gets a k x k impulse filter, i.e. an offset (dy, dx), and its N x N
convolution matrix T_h (`filters.impulse_conv_matrix`) is the target map. Q/K weights are then chosen
so that softmax(X Wq_h Wk_h^T X^T * scale) ~ T_h, where X is the position-only input the layer sees
when alpha = 0 (P for Models I/II; LN(P) as a proxy for a standard ViT). Two solvers:

- `closed_form` (default; the follow-up paper, arXiv 2505.19985): target logits L_h = c * T_h,
  M_h = X+ L_h X+^T / scale with a *truncated* pseudo-inverse X+ (the sin-cos P is rank-deficient:
  singular values below `rcond` * the largest are cut, else the weights explode, SPEC section 7), then
  a rank-d SVD M_h = U S V^T gives Wq_h = U sqrt(S), Wk_h = V sqrt(S). The logit gap c trades map
  sharpness against weight size; by default each head gets the smallest c (up to `max_gap`, found by
  a geometric grid and bisection) whose map puts `target_mass` (0.95) on the target offset, measured
  on the input the layer actually sees; `logit_gap` fixes c instead. Columns beyond rank(X) get
  small noise (std 0.02): exact zeros in both Wq and Wk would never receive a gradient. About 0.1 s
  per layer.
- `optimize` (paper 1's recipe): Wq (H x D x r), Wk (H x r x D) from U(+-sqrt(1/(r H))), Adam (lr 1e-4,
  10,000 steps) on MSE(softmax(X Wq Wk X^T * scale), T) with scale 0.1; every 100 steps Wq and Wk are
  rescaled so that their mean column norm (over D, over r) is back at its initial value ("weight
  normalisation": without it the weights grow without bound).
  The weights are then multiplied by sqrt(scale / layer scale) so the layer reproduces the fitted map.
  Minutes per layer on a CPU at paper scale (3 min single-threaded here, SPEC measured 20+), and the
  maps stay soft (SPEC section 3).

Model III layers (qk_input "free") have no X: `optimize` fits the factors Q_h, K_h directly (X = I),
and `closed_form` sets them to an exact rank-3 factorisation of the logits -gap * ||key - query - o||^2,
whose row maximum is the target offset o (for rows whose target leaves the grid: the nearest key);
the remaining r - 3 columns get small noise (std 0.02) so that they can still learn.

Supported models: convinit SimpleViTs (`simplevit`, `vit_tiny_patch2_32`, any qk_input) and timm-layout
ViTs (timm `VisionTransformer`, convinit `deit`): fused `blocks[i].attn.qkv`, learnable `pos_embed`.
For those, X = the patch rows of pos_embed after the block's norm1 (class/prefix tokens are left out
of the fit: their rows and columns of the map are not constrained), and the q/k biases are set to 0 so
that the fitted logits are exact on X. The fit works on the (random) learnable pos_embed as it is;
`sincos_pos_embed=True` first writes the fixed 2-D sin-cos P into it, the follow-up paper's setting.
As for a standard SimpleViT, X is a proxy there: the layers see norm1(patches + pos_embed).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.init import register_scheme
from convinit.init.filters import (
    Grid,
    Offset,
    centre_first_offsets,
    check_kernel_size,
    grid_coords,
    impulse_conv_matrix,
    random_offsets,
    target_keys,
)
from convinit.models.layers import posemb_sincos_2d
from convinit.models.vit import FreeAttention, SimpleViT

SUPPORTED = (
    "convinit SimpleViT models (simplevit, vit_tiny_patch2_32; qk_input x, blend or free) and timm-layout "
    "ViTs (timm VisionTransformer, timm Eva without RoPE, convinit deit)"
)
REST_STD = 0.02  # noise on the Q/K columns a closed form leaves unused (exact zeros never train)


# ---------------------------------------------------------------------------------------------------
# Attention layers as the init schemes see them


@dataclass
class AttentionSlot:
    """One attention layer: where its Q/K/V/out weights live and which position-only input it sees.

    `q_weight`, `k_weight`, `v_weight` are (H*d, D) views into the layer's parameters and `out_weight`
    its (D, H*d) output projection; writing into them (under no_grad) initialises the layer. Model III
    layers have `free` set instead of q/k weights. `inputs` holds the candidate pseudo-inputs X (N, D),
    on the CPU where the solvers run, and `seen` names the one the layer really sees when alpha = 0
    (or the closest proxy).
    """

    layer: int
    heads: int
    dim_head: int
    scale: float
    grid: Grid
    v_weight: torch.Tensor
    out_weight: torch.Tensor
    q_weight: torch.Tensor | None = None
    k_weight: torch.Tensor | None = None
    qk_biases: list[torch.Tensor] = field(default_factory=list)
    free: FreeAttention | None = None
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    seen: str | None = None
    seen_note: str = ""
    default_rms: float = 1.0  # rms of the model's default Q/K init, the unit of the reported weight scale


def is_timm_layout(model: nn.Module) -> bool:
    """A ViT with timm's layout: blocks[i].attn.qkv fused (3*H*d, D), norm1, and a pos_embed tensor."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Sequential | nn.ModuleList) or len(blocks) == 0:
        return False
    if not isinstance(getattr(model, "pos_embed", None), torch.Tensor):
        return False
    for block in blocks:
        attn = getattr(block, "attn", None)
        if not isinstance(getattr(attn, "qkv", None), nn.Linear) or not hasattr(attn, "num_heads"):
            return False
        if not hasattr(block, "norm1") or not isinstance(getattr(attn, "proj", None), nn.Linear):
            return False
    return True


def sincos_into_pos_embed(model: nn.Module) -> None:
    """Write the fixed 2-D sin-cos P into a timm-layout model's patch rows of pos_embed (prefix rows kept)."""
    grid = timm_grid(model)
    patches = grid[0] * grid[1]
    with torch.no_grad():
        model.pos_embed[0, -patches:] = posemb_sincos_2d(*grid, model.pos_embed.shape[-1]).to(model.pos_embed)


def timm_grid(model: nn.Module) -> Grid:
    grid = getattr(model, "grid", None) or getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if grid is None:
        raise ConfigError(
            "this timm-layout model exposes no patch grid (model.grid or patch_embed.grid_size)"
        )
    return int(grid[0]), int(grid[1])


def simplevit_slots(model: SimpleViT) -> list[AttentionSlot]:
    pos = model.pos_embedding  # (N, D)
    slots = []
    for index, (block, attn) in enumerate(zip(model.blocks, model.attention_layers(), strict=True)):
        inner = attn.heads * attn.dim_head
        slot = AttentionSlot(
            layer=index,
            heads=attn.heads,
            dim_head=attn.dim_head,
            scale=attn.scale,
            grid=model.grid,
            v_weight=attn.to_v.weight,
            out_weight=attn.to_out.weight,
            default_rms=(3 * attn.to_v.in_features) ** -0.5,  # nn.Linear's U(+-1/sqrt(D))
        )
        if isinstance(attn, FreeAttention):
            slot.free = attn
            slot.default_rms = 3**-0.5  # FreeAttention's normal init
        else:
            slot.q_weight, slot.k_weight = attn.to_qk.weight[:inner], attn.to_qk.weight[inner:]
            with torch.no_grad():
                slot.inputs = {"P": pos.float().cpu(), "LN(P)": block.norm(pos).float().cpu()}
            if model.qk_input == "blend":
                slot.seen, slot.seen_note = "P", f"P: exact at alpha = 0 (this model: alpha = {model.alpha})"
            elif model.pos_embed == "input":
                slot.seen, slot.seen_note = "LN(P)", "LN(P): a proxy, the layer sees LN(patches + P)"
        slots.append(slot)
    return slots


def timm_slots(model: nn.Module) -> list[AttentionSlot]:
    grid = timm_grid(model)
    patches = grid[0] * grid[1]
    pos = model.pos_embed.detach()[0]  # (T, D): prefix rows (if any) come first
    if pos.shape[0] < patches:
        raise ConfigError(f"pos_embed has {pos.shape[0]} rows but the grid has {patches} patches")
    pos = pos[-patches:]  # (N, D) patch rows
    slots = []
    for index, block in enumerate(model.blocks):
        attn = block.attn
        for norm_name in ("q_norm", "k_norm"):
            if not isinstance(getattr(attn, norm_name, nn.Identity()), nn.Identity):
                raise ConfigError(
                    "impulse/mimetic init cannot handle qk_norm; build the ViT with qk_norm=False"
                )
        heads = int(attn.num_heads)
        inner = attn.qkv.out_features // 3
        bias = attn.qkv.bias
        # timm's Eva keeps its q/k biases apart from the fused qkv (q_bias, k_bias), zero at init
        separate = [
            b for b in (getattr(attn, "q_bias", None), getattr(attn, "k_bias", None)) if b is not None
        ]
        with torch.no_grad():
            inputs = {"P": pos.float().cpu(), "LN(P)": block.norm1(pos).float().cpu()}
        slots.append(
            AttentionSlot(
                layer=index,
                heads=heads,
                dim_head=inner // heads,
                scale=float(getattr(attn, "scale", (inner // heads) ** -0.5)),
                grid=grid,
                q_weight=attn.qkv.weight[:inner],
                k_weight=attn.qkv.weight[inner : 2 * inner],
                v_weight=attn.qkv.weight[2 * inner :],
                out_weight=attn.proj.weight,
                qk_biases=([] if bias is None else [bias[: 2 * inner]]) + separate,
                inputs=inputs,
                seen="LN(P)",
                seen_note="LN(P) = norm1(patch rows of pos_embed): a proxy, the layer sees norm1(x + pos)",
                default_rms=0.02,  # timm's trunc-normal init of qkv
            )
        )
    return slots


def attention_slots(model: nn.Module, scheme: str) -> list[AttentionSlot]:
    """The model's attention layers as `AttentionSlot`s, or a ConfigError naming the supported models."""
    if isinstance(model, SimpleViT):
        return simplevit_slots(model)
    if is_timm_layout(model):
        if scheme == "impulse" and getattr(model, "rope", None) is not None:
            # e.g. timm's EVA-02: q and k are rotated by position inside attention, so the logits are
            # not (X W_q)(X W_k)^T and a fit of W_q, W_k would not give the maps it reports
            raise ConfigError(
                f"impulse init does not support {type(model).__name__} with rotary position embeddings "
                f"(RoPE rotates q and k inside attention, outside the fit); it supports {SUPPORTED} "
                f"(mimetic init works on this model)"
            )
        return timm_slots(model)
    raise ConfigError(f"{scheme} init does not support {type(model).__name__}; it supports {SUPPORTED}")


# ---------------------------------------------------------------------------------------------------
# Targets and how well a map hits them


def layer_offsets(mode: str, kernel_size: int, layer: int, heads: int, generator=None) -> list[Offset]:
    """The H target offsets of one layer (SPEC sections 3 and 7).

    random: uniform over the k*k taps (paper 1), a fresh draw per call. centre_first: the centre-first
    order cycled by layer * heads + head, so that deeper layers use the other offsets.
    """
    if mode == "random":
        return random_offsets(heads, kernel_size, generator)
    order = centre_first_offsets(kernel_size)
    return [order[(layer * heads + head) % len(order)] for head in range(heads)]


@dataclass
class Targets:
    """Target maps of one layer's heads: T (H, N, N), target key per query (H, N), inside grid (H, N)."""

    offsets: list[Offset]
    maps: torch.Tensor
    keys: torch.Tensor
    inside: torch.Tensor

    @classmethod
    def build(cls, offsets: list[Offset], grid: Grid) -> Targets:
        keys, inside = zip(*(target_keys(o, grid) for o in offsets), strict=True)
        maps = torch.stack([impulse_conv_matrix(o, grid) for o in offsets])
        return cls(offsets, maps, torch.stack(keys), torch.stack(inside))

    def select(self, heads: list[int]) -> Targets:
        """The targets of some heads only."""
        return Targets(
            [self.offsets[h] for h in heads], self.maps[heads], self.keys[heads], self.inside[heads]
        )


def target_mass(maps: torch.Tensor, targets: Targets) -> torch.Tensor:
    """Mean attention weight on the target key over rows whose target is inside the grid. (..., H)"""
    hit = maps.gather(-1, targets.keys[..., None].expand(*maps.shape[:-1], 1))[..., 0]  # (..., H, N)
    inside = targets.inside.to(maps.dtype)
    return (hit * inside).sum(-1) / inside.sum(-1).clamp_min(1)


def map_quality(maps: torch.Tensor, targets: Targets) -> dict[str, list[float]]:
    """Per head: target mass, argmax agreement (rows inside the grid), MSE against T (all rows)."""
    maps = maps.double()
    inside = targets.inside.double()
    agree = (maps.argmax(-1) == targets.keys).double()
    return {
        "mass": target_mass(maps, targets).tolist(),
        "argmax_agreement": ((agree * inside).sum(-1) / inside.sum(-1).clamp_min(1)).tolist(),
        "mse": (maps - targets.maps.double()).pow(2).mean(dim=(-2, -1)).tolist(),
    }


def smallest_gap(unit_logits: torch.Tensor, targets: Targets, wanted: float, max_gap: float) -> torch.Tensor:
    """Per head, the smallest c in [1, max_gap] with mass(softmax(c * logits)) >= wanted.

    A coarse geometric grid finds the first c that gets there, then bisection (in log c) refines it;
    a head that never gets there takes the grid c of its highest mass. unit_logits (H, N, N) -> (H,).
    """
    unit = unit_logits.float()

    def mass(gaps: torch.Tensor) -> torch.Tensor:
        return target_mass(torch.softmax(gaps[:, None, None].float() * unit, dim=-1), targets)  # (H,)

    heads = unit.shape[0]
    grid = torch.logspace(0, math.log10(max_gap), 13, dtype=torch.float64)
    masses = torch.stack([mass(c.expand(heads)) for c in grid])  # (G, H)
    reached = masses >= wanted
    first = torch.where(reached.any(0), reached.double().argmax(0), masses.argmax(0))
    refine = reached.any(0) & (first > 0)
    hi, lo = grid[first], grid[(first - 1).clamp_min(0)]
    for _ in range(12):
        mid = (lo * hi).sqrt()
        good = mass(mid) >= wanted
        hi = torch.where(refine & good, mid, hi)
        lo = torch.where(refine & ~good, mid, lo)
    return hi


# ---------------------------------------------------------------------------------------------------
# Solvers: each returns per-head factors with logits = X Wq_h Wk_h^T X^T * scale


@dataclass
class PseudoInverse:
    """The truncated SVD X ~ U S V^T behind X+ = V S^-1 U^T, kept to solve every head and layer cheaply."""

    x: torch.Tensor
    u: torch.Tensor  # (N, k)
    s: torch.Tensor  # (k,)
    v: torch.Tensor  # (D, k)

    @classmethod
    def of(cls, x: torch.Tensor, rcond: float) -> PseudoInverse:
        """Keep singular values above rcond * the largest (the sin-cos P is rank-deficient, SPEC 7)."""
        u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
        keep = s > rcond * s[0]
        return cls(x, u[:, keep], s[keep], vh[keep].T)


def closed_form_factors(
    pinv: PseudoInverse, targets: Targets, dim_head: int, scale: float, noise: float, generator
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Wq, Wk (H, D, d) with X Wq_h Wk_h^T X^T * scale ~ T_h (unit logit gap), and the rank used.

    M_h = X+ L_h X+^T / scale = V C_h V^T with the small core C_h = S^-1 U^T L_h U S^-1 / scale, so the
    rank-d SVD of M_h is V times the SVD of C_h. Columns beyond the rank of X are left zero.
    """
    logits = targets.maps.double()
    if noise:
        off = torch.randn(logits.shape, generator=generator, dtype=torch.float64) * noise
        logits = logits + off * (1 - logits)
    inv_s = 1.0 / pinv.s
    core = (pinv.u.T @ logits @ pinv.u) * inv_s[:, None] * inv_s[None, :] / scale  # (H, k, k)
    a, sigma, bh = torch.linalg.svd(core)
    rank = min(dim_head, len(pinv.s))
    root = sigma[:, :rank].sqrt()[:, None, :]  # (H, 1, rank)
    heads, dim = len(targets.offsets), pinv.v.shape[0]
    wq = torch.zeros(heads, dim, dim_head, dtype=torch.float64)
    wk = torch.zeros(heads, dim, dim_head, dtype=torch.float64)
    wq[..., :rank] = (pinv.v @ a[..., :rank]) * root  # (D, k) @ (H, k, rank)
    wk[..., :rank] = (pinv.v @ bh[:, :rank].transpose(1, 2)) * root
    return wq, wk, rank


def optimize_factors(
    x: torch.Tensor,
    targets: Targets,
    dim_head: int,
    scale: float,
    steps: int,
    lr: float,
    renorm_every: int,
    generator,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Paper 1's recipe: Adam on MSE(softmax(X Wq Wk X^T * scale), T) with periodic renormalisation.

    Before every `renorm_every`-th step, Wq is rescaled so that the mean norm of its columns over D is
    back at its initial value, and Wk likewise over r (one factor per tensor). Read this way, a paper
    layer (D 512, 8 heads, 16x16 grid, 10,000 steps) ends argmax-correct on every row with mass ~0.28
    and MSE 0.0020, close to SPEC section 3's measurement (0.32, 0.0018); normalising each column on
    its own ends at 83 % argmax agreement and mass 0.08. Returns Wq, Wk as (H, D, r) and the final MSE.
    With X = I (Model III) Wq, Wk are the factors themselves.
    """
    heads, dim = len(targets.offsets), x.shape[1]
    bound = math.sqrt(1.0 / (dim_head * heads))
    wq = ((torch.rand(heads, dim, dim_head, generator=generator) * 2 - 1) * bound).requires_grad_()
    wk = ((torch.rand(heads, dim_head, dim, generator=generator) * 2 - 1) * bound).requires_grad_()
    q_norm, k_norm = wq.detach().norm(dim=1).mean(), wk.detach().norm(dim=1).mean()
    x, target = x.float(), targets.maps.float()
    optimizer = torch.optim.Adam([wq, wk], lr=lr)
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        if renorm_every and step and step % renorm_every == 0:
            with torch.no_grad():  # one factor per tensor: the columns keep their relative norms
                wq.mul_(q_norm / wq.norm(dim=1).mean())  # column norms over D
                wk.mul_(k_norm / wk.norm(dim=1).mean())  # column norms over r
        logits = (x @ wq) @ (wk @ x.T) * scale  # (H, N, r) @ (H, r, N) -> (H, N, N)
        loss = F.mse_loss(torch.softmax(logits, dim=-1), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return wq.detach(), wk.detach().transpose(1, 2), float(loss.detach())


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


# ---------------------------------------------------------------------------------------------------
# Writing factors into layers


def write_qk(slot: AttentionSlot, wq: torch.Tensor, wk: torch.Tensor) -> None:
    """Copy per-head Wq, Wk (H, D, d) into the layer (rows h*d:(h+1)*d of the q and k projections)."""
    d = slot.dim_head
    with torch.no_grad():
        for head in range(slot.heads):
            slot.q_weight[head * d : (head + 1) * d] = wq[head].T.to(slot.q_weight)
            slot.k_weight[head * d : (head + 1) * d] = wk[head].T.to(slot.k_weight)
        for bias in slot.qk_biases:
            bias.zero_()


def slot_maps(slot: AttentionSlot, x: torch.Tensor | None) -> torch.Tensor:
    """The maps the layer produces on the position-only input x (or its free maps), (H, N, N)."""
    with torch.no_grad():
        if slot.free is not None:
            return slot.free.maps().double().cpu()
        x = x.double()  # the solvers work on the CPU whatever the model's device
        q = (x @ slot.q_weight.double().cpu().T).reshape(len(x), slot.heads, slot.dim_head).transpose(0, 1)
        k = (x @ slot.k_weight.double().cpu().T).reshape(len(x), slot.heads, slot.dim_head).transpose(0, 1)
        return torch.softmax(q @ k.transpose(1, 2) * slot.scale, dim=-1)  # (H, N, N)


def rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt())


def qk_parameters(slot: AttentionSlot) -> list[torch.Tensor]:
    if slot.free is not None:
        return [slot.free.q_factors, slot.free.k_factors]
    return [slot.q_weight, slot.k_weight]


# ---------------------------------------------------------------------------------------------------
# The scheme


SOLVERS = ("closed_form", "optimize")
OFFSET_MODES = ("random", "centre_first")
PSEUDO_INPUTS = ("P", "LN(P)")


@dataclass
class ImpulseOptions:
    """The scheme's options (see `impulse_init`), checked once."""

    solver: str = "closed_form"
    kernel_size: int = 5
    offsets: str = "random"
    share_offsets: bool = False
    pseudo_input: str | None = None
    logit_gap: float | None = None
    target_mass: float = 0.95
    max_gap: float = 1e4
    rcond: float = 1e-2
    noise: float = 0.0
    steps: int = 10_000
    lr: float = 1e-4
    scale: float = 0.1
    renorm_every: int = 100
    value_init: str = "default"

    def __post_init__(self) -> None:
        check_kernel_size(self.kernel_size)
        choices = {"solver": SOLVERS, "offsets": OFFSET_MODES, "value_init": ("default", "mimetic")}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(
                    f"impulse {key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}"
                )
        if self.pseudo_input is not None and self.pseudo_input not in PSEUDO_INPUTS:
            raise ConfigError(
                f"impulse pseudo_input must be 'P' or 'LN(P)' (or null: what the layer sees), "
                f"got {self.pseudo_input!r}"
            )
        if not 0.0 < self.target_mass < 1.0:
            raise ConfigError(f"impulse target_mass must be in (0, 1), got {self.target_mass!r}")
        for key in ("max_gap", "rcond", "lr", "scale"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"impulse {key} must be > 0, got {getattr(self, key)!r}")
        if self.logit_gap is not None and not self.logit_gap > 0:
            raise ConfigError(
                f"impulse logit_gap must be > 0 (or null to reach target_mass), got {self.logit_gap!r}"
            )
        if self.steps < 0 or self.renorm_every < 0:
            raise ConfigError("impulse steps and renorm_every must be >= 0")


@register_scheme("impulse")
def impulse_init(
    model: nn.Module, *, sincos_pos_embed: bool = False, seed: int | None = None, **options: Any
) -> dict[str, Any]:
    """Initialise every attention layer's maps to random impulse convolutions (SPEC section 3).

    Options (`ImpulseOptions`): solver "closed_form" | "optimize"; kernel_size (5, paper 1);
    offsets "random" (paper 1: uniform over the k*k taps) | "centre_first"; share_offsets (False:
    fresh filters per layer); pseudo_input "P" | "LN(P)" (None: what the layer sees, P for qk_input
    blend, LN(P) for a standard ViT). Closed form: logit_gap (None: per head the smallest gap whose map
    puts target_mass, 0.95, on the target, up to max_gap), rcond (pseudo-inverse cut-off, 1e-2),
    noise (std of Gaussian noise on the off-target logits, 0). Optimise: steps (10,000), lr (1e-4),
    scale (the fit's attention scale, 0.1), renorm_every (100). value_init "mimetic" also sets V/proj
    mimetic-style (follow-up paper). The follow-up's setting: kernel_size=3, offsets="centre_first",
    value_init="mimetic". `seed` makes offsets and optimiser starts reproducible (default: torch's
    global RNG). `sincos_pos_embed` first writes a sin-cos P into a timm-layout model's pos_embed.

    Reports per layer and head: target offset, logit gap, attention mass on the target offset, argmax
    agreement (rows whose target is inside the grid), MSE against T; per layer the Q/K weight scale
    (rms of the new weights / rms of the model's default init); and their means.
    """
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(ImpulseOptions)})
    if unknown:
        accepted = ", ".join(
            [f.name for f in dataclasses.fields(ImpulseOptions)] + ["sincos_pos_embed", "seed"]
        )
        raise ConfigError(f"impulse init takes no option {', '.join(unknown)}; it accepts: {accepted}")
    opts = ImpulseOptions(**options)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    if sincos_pos_embed:
        if not is_timm_layout(model):
            raise ConfigError("sincos_pos_embed only applies to timm-layout ViTs with a learnable pos_embed")
        sincos_into_pos_embed(model)
    slots = attention_slots(model, "impulse")
    if slots[0].free is None and slots[0].seen is None:
        raise ConfigError(
            "impulse init needs position information in the attention input, but this model has "
            "qk_input='x' and pos_embed='none'; use pos_embed: input or qk_input: blend"
        )
    shared = None  # share_offsets: one draw (random) or the order restarted (centre_first) in every layer
    if opts.share_offsets:
        shared = layer_offsets(opts.offsets, opts.kernel_size, 0, slots[0].heads, generator)
    cache = FitCache()
    layers = []
    for slot in slots:
        offsets = shared or layer_offsets(opts.offsets, opts.kernel_size, slot.layer, slot.heads, generator)
        targets = Targets.build(offsets, slot.grid)
        gaps = fit_slot(slot, targets, opts, cache, generator)
        weight_scale = sum(rms(p) for p in qk_parameters(slot)) / 2 / slot.default_rms
        if opts.value_init == "mimetic":
            from convinit.init.mimetic import mimetic_value_proj  # mimetic imports this module

            mimetic_value_proj(slot, generator=generator)
        quality = map_quality(
            slot_maps(slot, None if slot.free is not None else slot.inputs[slot.seen]), targets
        )
        heads = [
            {
                "head": h,
                "offset": list(offsets[h]),
                "logit_gap": None if gaps is None else float(gaps[h]),
                **{key: values[h] for key, values in quality.items()},
            }
            for h in range(slot.heads)
        ]
        layers.append({"layer": slot.layer, "weight_scale": weight_scale, "heads": heads})
    return summarise(layers, slots[0], opts)


@dataclass
class FitCache:
    """What the closed form can share between layers: SVDs of equal pseudo-inputs, gaps of equal fits.

    Layers of a fresh model see equal position-only inputs, so a head with an offset some earlier head
    already had (same input, same scale) gets the same factors and the same gap: found once.
    """

    inputs: list[torch.Tensor] = field(default_factory=list)
    pinvs: dict[tuple[int, float], PseudoInverse] = field(default_factory=dict)
    gaps: dict[tuple, float] = field(default_factory=dict)

    def input_id(self, x: torch.Tensor) -> int:
        for index, seen in enumerate(self.inputs):
            if seen.shape == x.shape and torch.equal(seen, x):
                return index
        self.inputs.append(x)
        return len(self.inputs) - 1

    def pseudo_inverse(self, x: torch.Tensor, rcond: float) -> PseudoInverse:
        key = (self.input_id(x), rcond)
        if key not in self.pinvs:
            self.pinvs[key] = PseudoInverse.of(x, rcond)
        return self.pinvs[key]


def layer_gaps(
    unit_logits, targets: Targets, opts: ImpulseOptions, cache: FitCache, key: tuple
) -> torch.Tensor:
    """Per-head logit gaps: the fixed `logit_gap`, or the smallest reaching `target_mass` (cached).

    unit_logits(heads) gives those heads' (h, N, N) logits at gap 1. A fit is a function of its input,
    scale and offset only (when no noise is drawn), so `key` + offset identifies it across layers.
    """
    heads = len(targets.offsets)
    if opts.logit_gap:
        return torch.full((heads,), float(opts.logit_gap), dtype=torch.float64)
    if opts.noise:
        return smallest_gap(unit_logits(list(range(heads))), targets, opts.target_mass, opts.max_gap)
    keys = [(*key, offset) for offset in targets.offsets]
    todo = sorted({keys.index(k) for k in keys if k not in cache.gaps})  # first head of each new fit
    if todo:
        found = smallest_gap(unit_logits(todo), targets.select(todo), opts.target_mass, opts.max_gap)
        cache.gaps.update({keys[h]: gap for h, gap in zip(todo, found.tolist(), strict=True)})
    return torch.tensor([cache.gaps[k] for k in keys], dtype=torch.float64)


def fit_slot(
    slot: AttentionSlot, targets: Targets, opts: ImpulseOptions, cache: FitCache, generator
) -> torch.Tensor | None:
    """Fit one layer and write its Q/K; returns the per-head logit gaps (closed form) or None."""
    if slot.free is not None:
        return fit_free(slot, targets, opts, cache, generator)
    x_fit = slot.inputs[opts.pseudo_input or slot.seen]
    if opts.solver == "optimize":
        wq, wk, _ = optimize_factors(x_fit, targets, slot.dim_head, opts.scale, opts.steps, opts.lr,
                                     opts.renorm_every, generator)  # fmt: skip
        factor = math.sqrt(opts.scale / slot.scale)  # the layer's own scale then gives the fitted map
        write_qk(slot, wq * factor, wk * factor)
        return None
    pinv = cache.pseudo_inverse(x_fit, opts.rcond)
    wq, wk, rank = closed_form_factors(pinv, targets, slot.dim_head, slot.scale, opts.noise, generator)
    x = slot.inputs[slot.seen].double()

    def unit_logits(heads: list[int]) -> torch.Tensor:  # (h, N, N) logits at gap 1 on what the layer sees
        return (x @ wq[heads]) @ (x @ wk[heads]).transpose(1, 2) * slot.scale

    key = (id(pinv), cache.input_id(slot.inputs[slot.seen]), slot.scale)
    gaps = layer_gaps(unit_logits, targets, opts, cache, key)
    root = gaps.sqrt()[:, None, None]
    wq, wk = wq * root, wk * root
    if rank < slot.dim_head:  # columns beyond rank(X) would be stuck at 0 (zero gradient): small noise
        for w in (wq, wk):
            w[..., rank:] = torch.randn(w[..., rank:].shape, generator=generator, dtype=w.dtype) * REST_STD
    write_qk(slot, wq, wk)
    return gaps


def fit_free(
    slot: AttentionSlot, targets: Targets, opts: ImpulseOptions, cache: FitCache, generator
) -> torch.Tensor | None:
    """Model III: fit the factors directly (optimize, X = I) or set the rank-3 quadratic form."""
    free = slot.free
    if opts.solver == "optimize":
        wq, wk, _ = optimize_factors(torch.eye(free.tokens), targets, slot.dim_head, opts.scale, opts.steps,
                                     opts.lr, opts.renorm_every, generator)  # fmt: skip
        factor = math.sqrt(opts.scale / slot.scale)
        with torch.no_grad():
            free.q_factors.copy_(wq * factor)  # (H, N, r)
            free.k_factors.copy_(wk.transpose(1, 2) * factor)  # (H, r, N)
        return None
    q, k = quadratic_factors(targets, slot.grid, slot.dim_head)  # (H, N, 3) each
    gaps = layer_gaps(lambda heads: q[heads] @ k[heads].transpose(1, 2), targets, opts, cache, ("free",))
    root = (gaps / slot.scale).sqrt()[:, None, None]
    q_factors = torch.randn(free.q_factors.shape, generator=generator, dtype=torch.float64) * REST_STD
    k_factors = torch.randn(free.k_factors.shape, generator=generator, dtype=torch.float64) * REST_STD
    q_factors[:, :, :3] = q * root  # (H, N, r)
    k_factors[:, :3, :] = (k * root).transpose(1, 2)  # (H, r, N)
    with torch.no_grad():
        free.q_factors.copy_(q_factors)
        free.k_factors.copy_(k_factors)
    return gaps


def summarise(layers: list[dict], slot: AttentionSlot, opts: ImpulseOptions) -> dict[str, Any]:
    heads = [h for layer in layers for h in layer["heads"]]

    def mean(key: str) -> float:
        return sum(h[key] for h in heads) / len(heads)

    return {
        "solver": opts.solver,
        "kernel_size": opts.kernel_size,
        "offsets": opts.offsets,
        "pseudo_input": None if slot.free is not None else opts.pseudo_input or slot.seen,
        "evaluated_on": "free maps (Model III)" if slot.free is not None else slot.seen_note,
        "mean_mass": mean("mass"),
        "mean_argmax_agreement": mean("argmax_agreement"),
        "mean_mse": mean("mse"),
        "mean_weight_scale": sum(layer["weight_scale"] for layer in layers) / len(layers),
        "layers": layers,
    }
