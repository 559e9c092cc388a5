"""ConViT's gated positional self-attention (GPSA), initialised as a convolution (docs/method.md §5).

A GPSA head mixes two attention maps with a learned gate g_h = sigmoid(lambda_h):

    A = (1 - g) * softmax(q k^T * d^-0.5) + g * softmax(pos_proj(r)),

where r[q, key] = (dx, dy, dx^2 + dy^2) are the key - query offsets on the patch grid. With the local
init, head p = h1 + k*h2 (k = sqrt(H)) puts its positional peak at offset (dx, dy) = (h2 - c, h1 - c):
the heads together start as a soft k x k convolution, and each gate decides how far a head leaves it.

Parameter names follow timm's `convit.py` (`qk`, `v`, `proj`, `pos_proj`, `gating_param`). The maps and
the fast path are functions (`positional_maps`, `gated_output`) that a user's ViT converted to GPSA
(`convinit.models.convert`) computes with too.

Differences from the official code, all output-preserving:
- The positional map softmax(pos_proj(r)) is computed once per forward, shared by the batch, shape
  (H, N, N); the official code recomputes pos_proj for every image. It is not cached across forwards:
  telling whether pos_proj changed would read the device (fused optimisers do not bump the version
  counter), and the map costs H x N x N, a fraction of one image's attention.
- The fast path is (1 - g) * SDPA(q, k, v) + g * (P_pos @ v). The official code divides A by its row sum;
  each row of A already sums to (1 - g) + g = 1, so this is a no-op in exact arithmetic and the fast path
  skips it. The explicit path (`record = True`, see `record_attention`) keeps it and stores the maps.
- Positional weights below float32's smallest normal number (1.2e-38) are zero, as a CPU that flushes
  subnormals makes them (see SUBNORMAL_WEIGHTS below): a change below 1e-38 in any weight.
- Rectangular patch grids work (the official rel indices assume a square grid).
- The official local init silently leaves heads beyond k*k with random positional rows when H is not
  a square; here that is a ConfigError unless `partial_local_init=True` asks for the official behaviour.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.models.layers import check_heads, fused_linear, init_linear


def relative_indices(rows: int, cols: int) -> torch.Tensor:
    """r[q, key] = (dx, dy, dx^2 + dy^2), dx/dy = key - query column/row offset; shape (N, N, 3).

    Patches are numbered row by row (q = row * cols + col), as the patch embedding flattens them.
    """
    row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    row, col = row.flatten().float(), col.flatten().float()  # (N,)
    dx = col[None, :] - col[:, None]  # (N, N): key column - query column
    dy = row[None, :] - row[:, None]
    return torch.stack((dx, dy, dx**2 + dy**2), dim=-1)


def local_head_offsets(num_heads: int) -> list[tuple[float, float]]:
    """The (dx, dy) offset each locally initialised head attends to (official layout, docs/method.md §5).

    k = int(sqrt(H)), centre c = (k - 1) / 2 for even k else k // 2; head p = h1 + k * h2 gets
    (dx, dy) = (h2 - c, h1 - c). Heads beyond k*k have no offset (they keep random rows).
    """
    k = math.isqrt(num_heads)
    c = (k - 1) / 2 if k % 2 == 0 else k // 2
    offsets = [(0.0, 0.0)] * (k * k)
    for h1 in range(k):
        for h2 in range(k):
            offsets[h1 + k * h2] = (h2 - c, h1 - c)
    return offsets


@torch.no_grad()
def write_local_init(pos_proj: nn.Linear, v_weight: torch.Tensor, num_heads: int, strength: float) -> None:
    """ConViT's local init, written into a GPSA layer's weights (convinit's, or a converted ViT's):
    v = I; pos_proj row p = strength * [2(h2 - c), 2(h1 - c), -1] (official layout, docs/method.md §5),
    the whole weight scaled, rows beyond k*k too, as in the official code."""
    v_weight.copy_(torch.eye(v_weight.shape[0]))
    for head, (dx, dy) in enumerate(local_head_offsets(num_heads)):
        pos_proj.weight[head, 0] = 2 * dx
        pos_proj.weight[head, 1] = 2 * dy
        pos_proj.weight[head, 2] = -1.0
    pos_proj.weight.mul_(strength)


def positional_maps(pos_proj: nn.Linear, rel_indices: torch.Tensor) -> torch.Tensor:
    """softmax(pos_proj(r)) over keys, shape (H, N, N), for relative indices r (N, N, 3).

    Full precision even under autocast: logits reach -alpha * (dx^2 + dy^2) ~ -300 on a 14 x 14 grid,
    where bfloat16 rounding (~1 unit) would visibly move the softmax. For the same reason pos_proj's
    three inputs are summed element-wise rather than by a matmul, which TF32 would round to 10 bits.
    """
    device = rel_indices.device.type  # the meta device (the memory guard's pass) has no autocast
    with torch.autocast(device, enabled=False) if device != "meta" else contextlib.nullcontext():
        weight, bias = pos_proj.weight, pos_proj.bias  # (H, 3), (H,)
        r = rel_indices.to(weight.dtype)  # (N, N, 3)
        logits = (r.unsqueeze(-2) * weight).sum(-1) + bias  # (N, N, H)
        maps = torch.softmax(logits.permute(2, 0, 1), dim=-1)  # (H, N, N)
        return maps.masked_fill(maps < torch.finfo(maps.dtype).tiny, 0.0)  # SUBNORMAL_WEIGHTS


# SUBNORMAL_WEIGHTS: a local map's weights far from its peak fall below float32's smallest normal number
# (1.2e-38; at locality strength 1 every offset beyond ~9 patches on a 14x14 or 16x16 grid). On x86 CPUs
# that compute subnormal operands in microcode, the positional product over such a map ran ConViT-Ti/2's
# training step 1.5x slower (the bmm 12x slower than on normal numbers) unless the thread flushed
# subnormals to zero, which `convinit train` does but a user's own loop around a converted ViT does not.
# Zeroing them here is what flushing would do to these weights (each is below any weight it is summed
# with by 38 orders of magnitude), so the maps cost the same with or without flushing.


def gated_output(
    content_out: torch.Tensor, v: torch.Tensor, positional: torch.Tensor, gate: torch.Tensor
) -> torch.Tensor:
    """GPSA's fast path: (1 - g) * content_out + (g * P) @ v, shape (B, N, H, d), from the content
    attention's output and v, both (B, H, N, d), the positional maps P (H, N, N) and the gates (H,).

    Never forms a (B, H, N, N) tensor: the gated map is shared by the batch, so each head's positional
    product is ONE matmul over all images."""
    batch, heads, tokens, head_dim = v.shape
    gated = (gate.view(-1, 1, 1) * positional).to(v.dtype)  # (H, N, N)
    v_heads = v.permute(1, 2, 0, 3).reshape(heads, tokens, batch * head_dim)  # (H, N, B*d)
    positional_out = torch.bmm(gated, v_heads).view(heads, tokens, batch, head_dim)  # (H, N, B, d)
    return torch.addcmul(  # (B, N, H, d)
        positional_out.permute(2, 1, 0, 3),
        content_out.transpose(1, 2),
        (1.0 - gate).view(1, 1, -1, 1).to(v.dtype),
    )


class GPSA(nn.Module):
    """Gated positional self-attention on a fixed patch grid (docs/method.md §5).

    Options for the paper's ablations: `use_local_init=False` keeps the random (trunc-normal) init of
    v and pos_proj; `freeze_gate` stops lambda from training (the gate stays sigmoid(1) = 0.73);
    `freeze` stops every parameter of the layer (qk, v, proj, pos_proj, gate) from training, so a
    locally initialised GPSA stays a fixed soft convolution mixed with fixed content attention.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        grid: tuple[int, int],
        qkv_bias: bool = False,
        locality_strength: float = 1.0,
        use_local_init: bool = True,
        partial_local_init: bool = False,
        freeze_gate: bool = False,
        freeze: bool = False,
    ):
        super().__init__()
        check_heads(dim, num_heads)
        if use_local_init and not partial_local_init and math.isqrt(num_heads) ** 2 != num_heads:
            raise ConfigError(
                f"ConViT local init needs a square number of heads (1, 4, 9, 16, ...), got {num_heads}; "
                f"pick a square num_heads or set use_local_init=False"
            )
        self.num_heads = num_heads
        self.dim = dim
        self.scale = (dim // num_heads) ** -0.5
        self.locality_strength = locality_strength
        self.qk = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.pos_proj = nn.Linear(3, num_heads)
        self.gating_param = nn.Parameter(torch.ones(num_heads))
        self.grid = (0, 0)
        self.register_buffer("rel_indices", torch.zeros(0, 0, 3), persistent=False)
        self.set_grid(grid)
        self.record = False
        self.attention_map: torch.Tensor | None = None
        for layer in (self.qk, self.v, self.proj, self.pos_proj):
            init_linear(layer)
        if use_local_init:
            self.local_init()
        if freeze_gate:
            self.gating_param.requires_grad_(False)
        if freeze:
            self.requires_grad_(False)

    def set_grid(self, grid: tuple[int, int]) -> None:
        """Rebuild the relative indices for a (rows, cols) patch grid, on the module's device."""
        rows, cols = grid
        self.grid = (rows, cols)
        self.rel_indices = relative_indices(rows, cols).to(self.qk.weight.device)  # (N, N, 3)

    @torch.no_grad()
    def local_init(self) -> None:
        """v = I; pos_proj row p = alpha * [2(h2 - c), 2(h1 - c), -1] (official layout, docs/method.md §5).

        The positional logit of head p is then -alpha * ||delta - Delta_p||^2 + const: a soft
        convolution tap at offset Delta_p. As in the official code, the whole weight (also rows
        beyond k*k) is scaled by alpha and the bias stays 0.
        """
        write_local_init(self.pos_proj, self.v.weight, self.num_heads, self.locality_strength)

    def gates(self) -> torch.Tensor:
        """g_h = sigmoid(lambda_h), shape (H,)."""
        return torch.sigmoid(self.gating_param)

    def positional_attention(self) -> torch.Tensor:
        """softmax(pos_proj(r)) over keys, shape (H, N, N), shared by every image of the batch."""
        return positional_maps(self.pos_proj, self.rel_indices)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        if tokens != self.grid[0] * self.grid[1]:
            raise ConfigError(
                f"GPSA was built for a {self.grid[0]}x{self.grid[1]} patch grid but got {tokens} tokens; "
                f"build the model with the img_size and patch_size of the input"
            )
        heads, head_dim = self.num_heads, dim // self.num_heads
        qkv = F.linear(x, *fused_linear(self.qk, self.v))  # one GEMM for q, k and v: (B, N, 3D)
        qkv = qkv.reshape(batch, tokens, 3, heads, head_dim)
        q, k = qkv[:, :, :2].permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, N, d) each
        v_tokens = qkv[:, :, 2]  # (B, N, H, d)
        v = v_tokens.transpose(1, 2)  # (B, H, N, d)
        gate = self.gates()  # (H,)
        positional = self.positional_attention()  # (H, N, N)
        if self.record:
            gate = gate.view(1, -1, 1, 1)
            content = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)  # (B, H, N, N)
            attn = (1.0 - gate) * content + gate * positional
            attn = attn / attn.sum(dim=-1, keepdim=True)  # the official renormalisation (a no-op)
            self.attention_map = attn.detach()
            out = (attn @ v).transpose(1, 2)  # (B, N, H, d)
        else:
            content_out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)  # (B, H, N, d)
            out = gated_output(content_out, v, positional, gate)  # (B, N, H, d)
        return self.proj(out.reshape(batch, tokens, dim))
