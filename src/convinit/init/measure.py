"""Attention maps measured where they matter: real forward passes of real images (SPEC section 7).

A map fitted on a position-only pseudo-input (P or LN(P)) says little about the map the layer
computes once image content enters its Q/K input (alpha * LN(x) + (1 - alpha) * P, or LN(x + P)).
`qk_inputs` hooks every attention layer and keeps the Q/K input it really receives; `layer_maps`
turns one layer's input into its softmax maps exactly as the layer does (the maps `record_attention`
shows); `real_pass_quality` reports, per layer and head, the attention mass on the target offset,
argmax agreement, normalised row entropy and mean attention distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.filters import Offset, grid_coords
from convinit.init.sites import AttentionSlot, attention_slots, qk_input_of
from convinit.init.targets import Targets

LOW_MASS = 0.2  # below this real-pass target mass the report warns: the maps are not convolutions


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once the wanted layer's input is known."""


def qk_inputs(
    model: nn.Module, slots: Sequence[AttentionSlot], images: torch.Tensor, upto: int | None = None
) -> list[torch.Tensor | None]:
    """Each slot's real Q/K input for `images`, (B, T, D) on the CPU, in eval mode, without gradients.

    upto: stop the forward pass at that slot (later slots get None): a fit of layer l needs only the
    input layer l sees given the layers before it. Free (Model III) slots get None.
    """
    seen: list[torch.Tensor | None] = [None] * len(slots)

    def hook_for(index: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen[index] = qk_input_of(args, kwargs).detach().double().cpu()
            if index == upto:
                raise _StopForward

        return hook

    handles = [
        slot.module.register_forward_pre_hook(hook_for(i), with_kwargs=True)
        for i, slot in enumerate(slots)
        if slot.module is not None and slot.free is None
    ]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            model(images.to(device))
    except _StopForward:
        pass
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return seen


def qk_bias(slot: AttentionSlot) -> torch.Tensor | None:
    """The (2*H*d,) q/k bias of a timm-layout layer (fused or separate), or None."""
    module = slot.module
    inner = slot.heads * slot.dim_head
    bias = getattr(getattr(module, "qkv", None), "bias", None)
    if bias is not None:
        return bias[: 2 * inner]
    parts = [getattr(module, name, None) for name in ("q_bias", "k_bias")]
    if any(part is not None for part in parts):
        return torch.cat([p if p is not None else torch.zeros(inner) for p in parts])
    return None


def layer_maps(slot: AttentionSlot, x: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T * scale) of one layer on its Q/K input x (B, T, D): (B, H, T, T), float64, CPU.

    Free (Model III) layers ignore x and give their (1, H, N, N) maps.
    """
    with torch.no_grad():
        if slot.free is not None:
            return slot.free.maps().double().cpu()[None]
        weight = torch.cat([slot.q_weight, slot.k_weight]).double().cpu()  # (2*H*d, D)
        qk = x.double() @ weight.T  # (B, T, 2*H*d)
        bias = qk_bias(slot)
        if bias is not None:
            qk = qk + bias.double().cpu()
        batch, tokens, _ = qk.shape
        q, k = qk.reshape(batch, tokens, 2, slot.heads, slot.dim_head).permute(2, 0, 3, 1, 4)  # (B, H, T, d)
        return torch.softmax(q @ k.transpose(-2, -1) * slot.scale, dim=-1)


def map_statistics(maps: torch.Tensor, targets: Targets | None, grid) -> dict[str, list[float]]:
    """Per head, averaged over images and patch rows: target mass, argmax agreement (rows whose target
    is inside the grid), row entropy / log(keys), mean attention distance in patches (patch keys).

    maps (B, H, T, T): the last N = rows * cols tokens are the patches, any before them prefix tokens.
    """
    patches = grid[0] * grid[1]
    rows = maps[..., -patches:, :]  # (B, H, N, T)
    entropy = -(rows * rows.clamp_min(1e-30).log()).sum(-1) / math.log(maps.shape[-1])
    coords = grid_coords(grid).double()
    distance = torch.cdist(coords, coords)  # (N, N) in patches
    stats = {
        "entropy": entropy.mean(dim=(0, 2)).tolist(),
        "distance": (rows[..., -patches:] * distance).sum(-1).mean(dim=(0, 2)).tolist(),
    }
    if targets is not None:
        keys = targets.keys + (maps.shape[-1] - patches)  # (H, N) token index of each target key
        inside = targets.inside.double()
        hit = rows.gather(-1, keys[..., None].expand(*rows.shape[:-1], 1))[..., 0]  # (B, H, N)
        agree = (rows.argmax(-1) == keys).double()
        stats["mass"] = ((hit * inside).sum(-1) / inside.sum(-1).clamp_min(1)).mean(0).tolist()
        stats["argmax_agreement"] = ((agree * inside).sum(-1) / inside.sum(-1).clamp_min(1)).mean(0).tolist()
    return stats


def real_pass_quality(
    model: nn.Module,
    slots: Sequence[AttentionSlot],
    images: torch.Tensor,
    offsets: Sequence[Sequence[Offset]] | None = None,
) -> dict[str, Any]:
    """Per layer and head statistics of the maps on real `images` (one forward pass), with their means.

    offsets[l][h]: the target offset of head h in layer l (impulse); without it no mass or agreement.
    """
    if images.dim() != 4 or len(images) == 0:
        raise ConfigError(f"images must be a non-empty (B, C, H, W) batch, got shape {tuple(images.shape)}")
    inputs = qk_inputs(model, slots, images)
    layers = []
    for index, (slot, x) in enumerate(zip(slots, inputs, strict=True)):
        targets = None if offsets is None else Targets.build(list(offsets[index]), slot.grid)
        stats = map_statistics(layer_maps(slot, x), targets, slot.grid)
        heads = [{"head": h, **{key: values[h] for key, values in stats.items()}} for h in range(slot.heads)]
        layers.append({"layer": slot.layer, "qk_input": slot.real_input, "heads": heads})
    every = [h for layer in layers for h in layer["heads"]]
    means = {f"mean_{key}": sum(h[key] for h in every) / len(every) for key in every[0] if key != "head"}
    return {"images": len(images), "qk_input": slots[0].real_input, **means, "layers": layers}


def untargeted_real_pass(model: nn.Module, images: torch.Tensor) -> dict[str, Any] | None:
    """Entropy and attention distance on real images for any scheme (no targets), or None for models
    whose attention the init schemes do not reach (e.g. ConvMixer)."""
    try:
        slots = attention_slots(model, "measure")
    except ConfigError:
        return None
    return real_pass_quality(model, slots, images)
