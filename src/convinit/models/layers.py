"""Pieces shared by several models: patch embedding, sin-cos position embedding, attention, MLP.

Attention runs through `torch.nn.functional.scaled_dot_product_attention` (fused kernels on GPU, a
single call on CPU). When a caller needs the attention maps themselves, `record_attention(model)`
switches every attention layer to the explicit path, softmax(q k^T * scale) @ v, and keeps the maps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError


def pair(size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """(height, width) from an int or a pair."""
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)


def patch_grid(img_size: int | tuple[int, int], patch_size: int) -> tuple[int, int]:
    """The (rows, cols) patch grid, or a ConfigError if the patch does not tile the image."""
    height, width = pair(img_size)
    if patch_size < 1 or height % patch_size or width % patch_size:
        raise ConfigError(
            f"patch_size {patch_size} does not divide the image size {height}x{width}; "
            f"pick a patch size that divides both sides (or set img_size)"
        )
    return height // patch_size, width // patch_size


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut (B, C, H, W) images into (B, N, p*p*C) patch vectors, rows first (like vit-pytorch)."""
    batch, channels, height, width = images.shape
    p = patch_size
    x = images.reshape(batch, channels, height // p, p, width // p, p)  # (B, C, h, p, w, p)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, h, w, p, p, C)
    return x.reshape(batch, (height // p) * (width // p), p * p * channels)


def posemb_sincos_2d(rows: int, cols: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sin-cos position embedding P, shape (rows*cols, dim) (SPEC section 2).

    omega_i = 1 / temperature^(i / (dim/4 - 1)); columns are [sin x, cos x, sin y, cos y].
    """
    if dim % 4:
        raise ConfigError(f"the sin-cos position embedding needs dim divisible by 4, got {dim}")
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    omega = torch.arange(dim // 4, dtype=torch.float64) / max(dim // 4 - 1, 1)
    omega = 1.0 / (temperature**omega)
    y = y.flatten()[:, None].double() * omega[None, :]
    x = x.flatten()[:, None].double() * omega[None, :]
    return torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1).float()


def fused_linear(*layers: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weight and bias of several linear layers on the same input stacked as one: one GEMM instead of
    several (the copy of the weights is tiny beside the activations), parameters kept as they are."""
    weight = torch.cat([layer.weight for layer in layers])
    if all(layer.bias is None for layer in layers):
        return weight, None
    biases = [
        layer.bias if layer.bias is not None else weight.new_zeros(layer.out_features) for layer in layers
    ]
    return weight, torch.cat(biases)


class FeedForward(nn.Module):
    """Pre-norm MLP: LN -> Linear -> GELU -> Linear."""

    def __init__(self, dim: int, hidden_dim: int, norm: bool = True):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim) if norm else nn.Identity(),
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Attention(nn.Module):
    """Multi-head self-attention with separate Q/K and V inputs.

    `forward(x, qk_input)` takes V from `x` and Q, K from `qk_input` (default: `x`), which is what
    paper 1's Models I and II need. Q and K share one projection `to_qk` (D -> 2*H*d), V has `to_v`.
    """

    def __init__(self, dim: int, heads: int = 8, dim_head: int = 64, attn_scale: float | None = None):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.dim_head = dim_head
        self.scale = float(attn_scale) if attn_scale is not None else dim_head**-0.5
        self.to_qk = nn.Linear(dim, 2 * inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.record = False
        self.attention_map: torch.Tensor | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        return x.reshape(batch, tokens, self.heads, self.dim_head).transpose(1, 2)  # (B, H, N, d)

    def queries_keys(self, qk_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = self.to_qk(qk_input).chunk(2, dim=-1)
        return self.split_heads(q), self.split_heads(k)  # (B, H, N, d) each

    def forward(self, x: torch.Tensor, qk_input: torch.Tensor | None = None) -> torch.Tensor:
        if qk_input is None:  # q, k and v from the same input: one GEMM
            q, k, v = (
                self.split_heads(t) for t in F.linear(x, *fused_linear(self.to_qk, self.to_v)).chunk(3, -1)
            )
        else:
            q, k = self.queries_keys(qk_input)
            v = self.split_heads(self.to_v(x))
        if self.record:
            attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)  # (B, H, N, N)
            self.attention_map = attn.detach()
            out = attn @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        out = out.transpose(1, 2).flatten(2)  # (B, N, H*d)
        return self.to_out(out)


class AttentionMaps(Mapping):
    """Live view of the maps the recording layers kept in their last forward pass."""

    def __init__(self, layers: dict[str, nn.Module]):
        self._layers = layers
        self._frozen: dict[str, torch.Tensor] | None = None

    def _current(self) -> dict[str, torch.Tensor]:
        if self._frozen is not None:
            return self._frozen
        return {n: m.attention_map for n, m in self._layers.items() if m.attention_map is not None}

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


@contextmanager
def record_attention(model: nn.Module) -> Iterator[AttentionMaps]:
    """Within the block, each forward pass keeps every attention layer's maps.

    Yields a mapping from module name to the (B, H, N, N) maps of the last forward pass; it stays
    readable after the block. Any module with `record` and `attention_map` attributes takes part
    (all attention layers in convinit do).
    """
    layers = {n: m for n, m in model.named_modules() if hasattr(m, "record") and hasattr(m, "attention_map")}
    maps = AttentionMaps(layers)
    for layer in layers.values():
        layer.record = True
    try:
        yield maps
    finally:
        maps._frozen = maps._current()
        for layer in layers.values():
            layer.record = False
            layer.attention_map = None
