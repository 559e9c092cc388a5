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
from convinit.models.token_grid import token_grid


def attention_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's attention layers in forward order: the modules `record_attention` records.

    Layer index l in tracker keys (`nonlocality/L{l}`, `gate/L{l}/H{h}`) is the position in this list.
    """
    return [(n, m) for n, m in model.named_modules() if hasattr(m, "record") and hasattr(m, "attention_map")]


def attention_slots_of(model: nn.Module) -> list:
    """The attention layers of a model whose layers record no maps (timm and transformers ViTs), as
    `convinit.init.attention_sites` finds them; [] for a model with none it can read."""
    from convinit.init.attention_sites import attention_slots

    try:
        return attention_slots(model, "measure")
    except ConfigError:
        return []


def slot_attention(model: nn.Module, slots: list, images: torch.Tensor) -> list[torch.Tensor]:
    """Each slot's (B, H, T, T) maps on `images`, computed from the Q/K input its layer really receives
    on one eval-mode forward pass, as the layer computes them (`convinit.init.measure`)."""
    from convinit.init.measure import layer_maps, qk_inputs

    inputs = qk_inputs(model, slots, images)
    return [layer_maps(slot, x).float() for slot, x in zip(slots, inputs, strict=True)]


def has_attention_layers(model: nn.Module) -> bool:
    """Whether `attention_maps` can show this model's attention (convinit's layers, timm, transformers)."""
    return bool(attention_layers(model)) or bool(attention_slots_of(model))


@torch.no_grad()
def attention_maps(model: nn.Module, images: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every attention layer's (B, H, T, T) maps of one eval-mode forward pass of `images`, by module name
    in forward order: recorded by convinit's layers (`record_attention`), or, for a timm or transformers
    ViT, computed from the Q/K input each layer really receives. {} for a model without attention."""
    if attention_layers(model):
        was_training = model.training
        model.eval()
        try:
            with record_attention(model) as maps:
                model(images)
        finally:
            model.train(was_training)
        return dict(maps.items())
    slots = attention_slots_of(model)
    names = {id(module): name for name, module in model.named_modules()}
    maps = slot_attention(model, slots, images) if slots else []
    return {names.get(id(slot.module), f"layer{slot.layer}"): m for slot, m in zip(slots, maps, strict=True)}


def patch_distances(rows: int, cols: int) -> torch.Tensor:
    """||delta(q, key)|| between patch centres in patch units, shape (N, N), patches row by row."""
    row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    coords = torch.stack((row.flatten(), col.flatten()), dim=1).double()  # (N, 2)
    return torch.cdist(coords, coords).float()


def model_grid(model: nn.Module, tokens: int) -> tuple[int, int]:
    """The model's (rows, cols) patch grid: `model.grid` (convinit) or `patch_embed.grid_size` (timm) if
    set, else a square grid of `tokens` patches (after at most one class token)."""
    grid = token_grid(model)
    if grid is not None:
        return grid
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
    if not layers:  # a timm or transformers ViT: its maps computed from each layer's Q/K input
        for chunk in images.split(chunk_size):
            for index, attn in enumerate(attention_maps(model, chunk).values()):
                grid = model_grid(model, attn.shape[-1])
                per_head = head_nonlocality(attn, grid, renormalise, reduce="sum").double()
                sums[index] = sums.get(index, 0) + per_head
        return nonlocality_keys(sums, images.shape[0])

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
    return nonlocality_keys(sums, images.shape[0])


def nonlocality_keys(sums: dict[int, torch.Tensor], count: int) -> dict[str, float]:
    """`nonlocality/L{l}` and `nonlocality/L{l}/H{h}` from per-layer sums over `count` images."""
    out: dict[str, float] = {}
    for index in sorted(sums):
        per_head = sums[index] / count
        out[f"nonlocality/L{index}"] = float(per_head.mean())
        for head, value in enumerate(per_head.tolist()):
            out[f"nonlocality/L{index}/H{head}"] = value
    return out
