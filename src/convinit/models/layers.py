"""Pieces shared by several models: patches, position embeddings, attention, MLPs, blocks, DropPath.

Two sets of names live here, each kept because a set of state dicts depends on it: SimpleViT's pieces
(`FeedForward`, `Attention`: vit-pytorch's `to_qk`, `to_v`, `to_out`, `net`) and the timm-style pieces
that ConViT and DeiT share (`PatchEmbed`, `MHSA`, `Mlp`, `Block`, `ClassTokenViT`: timm's `qkv`, `proj`,
`fc1`, `fc2`, `norm1`, `cls_token`, `pos_embed`), so that a timm ConViT or DeiT state dict loads unchanged.

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
from convinit.models.small_heads import applies, small_head_attention


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
    """Fixed 2-D sin-cos position embedding P, shape (rows*cols, dim) (docs/method.md §2).

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


# content_projection: an input direction of the Q/K projection counts as fitted when its singular value
# is at least this share of the largest. Impulse's closed form on the digits ViT (alpha 0.1-0.5) gives 7
# directions at 3-53 and the rest at 0.31 or less (its noise columns), so the cut falls in a wide gap.
FITTED_DIRECTION_SHARE = 0.05


def fitted_direction_projector(weight: torch.Tensor) -> torch.Tensor:
    """I - V V^T, V the input directions of a Q/K weight (out, D) whose singular value is at least
    FITTED_DIRECTION_SHARE of the largest: what removes them from a D-vector (multiply on the right)."""
    _, sigma, vh = torch.linalg.svd(weight.detach().double(), full_matrices=False)
    basis = vh[sigma >= FITTED_DIRECTION_SHARE * sigma[0]]  # (k, D)
    eye = torch.eye(weight.shape[1], dtype=torch.float64, device=weight.device)
    return (eye - basis.T @ basis).to(weight.dtype)


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


def attend(layer: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T * layer.scale) @ v over (B, H, N, d) inputs: one SDPA call, or, while the layer
    records (`record_attention`), the explicit product, keeping the (B, H, N, N) maps on the layer."""
    if layer.record:
        attn = torch.softmax((q @ k.transpose(-2, -1)) * layer.scale, dim=-1)  # (B, H, N, N)
        layer.attention_map = attn.detach()
        return attn @ v
    return scaled_attention(q, k, v, layer.scale)


def scaled_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, dropout: float = 0.0
) -> torch.Tensor:
    """softmax(q k^T * scale) @ v over (B, H, N, d): torch's SDPA, or where it is switched on and applies,
    the fused kernel for many small heads on a CPU (`convinit.models.small_heads`)."""
    if applies(q, dropout):
        return small_head_attention(q, k, v, scale)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scale)


def check_positive(**sizes: int) -> None:
    """A ConfigError naming the first of `sizes` (dim=..., depth=...) that is not a positive integer."""
    for name, value in sizes.items():
        if value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value}")


def check_heads(dim: int, num_heads: int) -> None:
    if num_heads < 1 or dim % num_heads:
        raise ConfigError(f"embed_dim {dim} is not divisible by num_heads {num_heads}; change one of them")


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
        self.kernel_head_dim = dim_head  # attends through scaled_attention (small_heads.kernel_layers)
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
        out = attend(self, q, k, v).transpose(1, 2).flatten(2)  # (B, N, H*d)
        return self.to_out(out)


# timm-style pieces (ConViT, DeiT): timm's module names and init, LayerNorm eps 1e-6

LN_EPS = 1e-6


def init_linear(layer: nn.Linear) -> None:
    """timm/DeiT init: trunc-normal weights (std 0.02), zero bias."""
    nn.init.trunc_normal_(layer.weight, std=0.02)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


class DropPath(nn.Module):
    """Stochastic depth: drop a sample's whole residual branch with probability `rate` (training only)."""

    def __init__(self, rate: float = 0.0):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rate == 0.0 or not self.training:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1.0 - self.rate)
        return x * keep / (1.0 - self.rate)


def drop_path_rates(rate: float, depth: int) -> list[float]:
    """Stochastic depth rate of each block: linspace(0, rate, depth) (plain floats, so meta-device safe).

    A rate outside [0, 1) is a ConfigError: at 1 every residual branch would be dropped.
    """
    if not 0.0 <= rate < 1.0:
        raise ConfigError(f"drop_path_rate must be in [0, 1), got {rate}")
    return [rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]


class Mlp(nn.Module):
    """fc1 -> GELU -> fc2 (timm naming; the block's norm2 sits outside)."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)
        init_linear(self.fc1)
        init_linear(self.fc2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class PatchEmbed(nn.Module):
    """p x p patches -> D channels by a strided conv: (B, C, H, W) -> (B, N, D), patches row by row."""

    def __init__(self, img_size: int | tuple[int, int], patch_size: int, in_chans: int, dim: int):
        super().__init__()
        self.img_size = pair(img_size)
        self.patch_size = patch_size
        self.in_chans = in_chans
        self.dim = dim
        self.grid = patch_grid(img_size, patch_size)  # (rows, cols)
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, N, D)


class MHSA(nn.Module):
    """Plain multi-head self-attention (timm naming `qkv`, `proj`): SDPA, or explicit maps when recording."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = False):
        super().__init__()
        check_heads(dim, num_heads)
        self.num_heads = num_heads
        self.kernel_head_dim = dim // num_heads  # attends through scaled_attention
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        init_linear(self.qkv)
        init_linear(self.proj)
        self.record = False
        self.attention_map: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, N, d) each
        return self.proj(attend(self, q, k, v).transpose(1, 2).reshape(batch, tokens, dim))


class Block(nn.Module):
    """Pre-norm block: x + DropPath(attn(LN(x))), then x + DropPath(mlp(LN(x)))."""

    def __init__(self, dim: int, attn: nn.Module, mlp_ratio: float = 4.0, drop_path: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = attn
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ClassTokenViT(nn.Module):
    """The frame ConViT and DeiT share: patch embedding, class token, learnable position embedding, then
    the model's own `blocks`, a final LayerNorm and a linear head read at the class token (timm's names).

    `__init__` takes the `patch_embed` and makes `cls_token` and `pos_embed` (over the patches, plus the
    class token when `pos_embed_covers_cls`); the model then builds its `blocks` and calls `add_head`.
    Modules are made in that order because the random initialisation draws in it: the same seed, the
    same weights.
    """

    def __init__(self, patch_embed: PatchEmbed, pos_embed_covers_cls: bool):
        super().__init__()
        # the input the model was built for, which init and analysis read
        self.img_size = patch_embed.img_size
        self.in_chans = patch_embed.in_chans
        self.patch_size = patch_embed.patch_size
        self.patch_embed = patch_embed
        self.grid = patch_embed.grid  # (rows, cols)
        positions = int(pos_embed_covers_cls) + self.grid[0] * self.grid[1]
        self.cls_token = nn.Parameter(torch.zeros(1, 1, patch_embed.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, positions, patch_embed.dim))

    def add_head(self, embed_dim: int, num_classes: int) -> None:
        """The final LayerNorm and the classifier (Identity for num_classes 0: a feature extractor)."""
        self.num_classes = num_classes
        self.norm = nn.LayerNorm(embed_dim, eps=LN_EPS)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()

    def no_weight_decay(self) -> set[str]:
        """Parameters the DeiT recipe excludes from weight decay (besides 1-D ones)."""
        return {"pos_embed", "cls_token"}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits from the class token of the model's `forward_features`."""
        return self.head(self.forward_features(images)[:, 0])


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
