"""Non-locality of attention: how far, in patches, each head looks (ConViT paper, docs/method.md §5).

For one head with attention A over the patch grid,

    nonlocality = (1/N) * sum_{q, key} A[q, key] * ||delta(q, key)||     (patch units),

the mean over queries of the expected distance to the attended key; a layer's value is the mean over
its heads, and both are averaged over the images of a batch.

Computed on real forward passes: images go through the patch embedding, the position embedding and
every earlier layer, exactly as in training (`record_attention`). The official ConViT logging instead
fed the raw patch embeddings to every layer on its own, without position embedding or earlier layers
(a known bug), which is not the attention the model uses.

Class tokens: when a layer's maps have more tokens than the patch grid (N + p, the p prefix tokens
first, as in DeiT and ConViT's MHSA blocks), only patch-to-patch attention is measured: rows and
columns of the prefix tokens are dropped and each patch query's row is renormalised over the patch
keys, so the value is the expected distance to the patches a patch query attends to (the class token
has no position on the grid). `renormalise=False` keeps the raw sub-block instead, which counts the
mass given to the class token as distance 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.layers import record_attention


def attention_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's attention layers in forward order: the modules `record_attention` records.

    Layer index l in tracker keys (`nonlocality/L{l}`, `gate/L{l}/H{h}`) is the position in this list.
    """
    return [(n, m) for n, m in model.named_modules() if hasattr(m, "record") and hasattr(m, "attention_map")]


def patch_distances(rows: int, cols: int) -> torch.Tensor:
    """||delta(q, key)|| between patch centres in patch units, shape (N, N), patches row by row."""
    row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    coords = torch.stack((row.flatten(), col.flatten()), dim=1).double()  # (N, 2)
    return torch.cdist(coords, coords).float()


def model_grid(model: nn.Module, tokens: int) -> tuple[int, int]:
    """The model's (rows, cols) patch grid: `model.grid` if set, else a square grid of `tokens` patches."""
    grid = getattr(model, "grid", None)
    if grid is not None:
        return int(grid[0]), int(grid[1])
    for prefix in (0, 1):
        side = math.isqrt(tokens - prefix)
        if side * side == tokens - prefix:
            return side, side
    raise ConfigError(
        f"cannot tell the patch grid of a model with {tokens} tokens; give the model a `grid` attribute"
    )


def patch_attention(attn: torch.Tensor, num_patches: int, renormalise: bool = True) -> torch.Tensor:
    """Patch-to-patch block of (B, H, T, T) maps whose first T - N tokens are prefix (class) tokens."""
    prefix = attn.shape[-1] - num_patches
    if prefix < 0:
        raise ConfigError(f"maps over {attn.shape[-1]} tokens cannot cover a grid of {num_patches} patches")
    attn = attn[..., prefix:, prefix:]  # (B, H, N, N)
    if prefix and renormalise:
        attn = attn / attn.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return attn


def head_nonlocality(
    attn: torch.Tensor, grid: tuple[int, int], renormalise: bool = True, reduce: str = "mean"
) -> torch.Tensor:
    """Non-locality per head of (B, H, T, T) maps: shape (H,), the mean (or `reduce="sum"`) over the batch."""
    distances = patch_distances(*grid).to(attn.device, attn.dtype)  # (N, N)
    attn = patch_attention(attn, grid[0] * grid[1], renormalise)
    per_image = (attn * distances).sum(dim=-1).mean(dim=-1)  # (B, H): mean over queries of E[distance]
    return per_image.sum(dim=0) if reduce == "sum" else per_image.mean(dim=0)


@torch.no_grad()
def nonlocality(
    model: nn.Module, images: torch.Tensor, chunk_size: int = 64, renormalise: bool = True
) -> dict[str, float]:
    """Non-locality of every attention layer and head on real forward passes over `images`.

    Keys `nonlocality/L{l}` (mean over heads) and `nonlocality/L{l}/H{h}`, averaged over the images.
    Maps are reduced as each layer produces them and images go through in chunks, so memory holds one
    layer's (chunk, H, T, T) maps at a time. The model runs in eval mode (no drop path) and is put
    back in its previous mode.
    """
    layers = attention_layers(model)
    sums: dict[int, torch.Tensor] = {}

    def reducer(index: int):
        def hook(module: nn.Module, inputs, output) -> None:
            attn = module.attention_map
            grid = model_grid(model, attn.shape[-1])
            per_head = head_nonlocality(attn.float(), grid, renormalise, reduce="sum").double()
            sums[index] = sums.get(index, 0) + per_head
            module.attention_map = None  # free the maps before the next layer runs

        return hook

    handles = [m.register_forward_hook(reducer(i)) for i, (_, m) in enumerate(layers)]
    was_training = model.training
    model.eval()
    try:
        with record_attention(model):
            for chunk in images.split(chunk_size):
                model(chunk)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    out: dict[str, float] = {}
    for index in sorted(sums):
        per_head = sums[index] / images.shape[0]
        out[f"nonlocality/L{index}"] = float(per_head.mean())
        for head, value in enumerate(per_head.tolist()):
            out[f"nonlocality/L{index}/H{head}"] = value
    return out
