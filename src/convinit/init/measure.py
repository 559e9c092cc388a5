"""Attention maps measured where they matter: real forward passes of real images (docs/method.md §7).

A map fitted on a position-only pseudo-input (P or LN(P)) says little about the map the layer
computes once image content enters its Q/K input (alpha * LN(x) + (1 - alpha) * P, or LN(x + P)).
`BlockRunner` (`convinit.init.block_runner`) reads the Q/K input each layer really receives, one block at a
time (`qk_inputs`, one plain forward pass with hooks, is the reference it equals); `layer_maps` turns
one layer's input into its softmax maps exactly as the layer does (the maps `record_attention` shows);
`real_pass_quality` reports, per layer and head, the attention mass on the target offset, argmax
agreement, normalised row entropy and mean attention distance. Maps are computed in float32 on the
model's device: the means differ from float64 by less than 1e-4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.attention_sites import AttentionSlot, attention_slots
from convinit.init.block_runner import BlockRunner
from convinit.init.targets import Targets, row_figures
from convinit.models.filters import Offset, grid_coords

LOW_MASS = 0.2  # below this real-pass target mass the report warns: the maps are not convolutions
MEASURE_TOKENS = 2048  # patch tokens of real images a real-pass report measures (ViT-Ti/2: 8 images)
HELD_OUT = 0.25  # share of an init's image batch held apart from its fit and measured on its own
FIT_TOKENS = 4096  # patch tokens of real images a layer is fitted on (ViT-Ti/2: 16 images; 7x7 grid: 84)


def qk_inputs(
    model: nn.Module, slots: Sequence[AttentionSlot], images: torch.Tensor
) -> list[torch.Tensor | None]:
    """Each slot's real Q/K input for `images` from one plain forward pass, (B, T, D) on the CPU, in
    eval mode, without gradients; free (Model III) slots get None. The reference `BlockRunner` equals."""
    seen: list[torch.Tensor | None] = [None] * len(slots)

    def hook_for(index: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen[index] = slots[index].qk_input_of(args, kwargs).detach().cpu()

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
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return seen


def qk_bias(slot: AttentionSlot) -> torch.Tensor | None:
    """The (2*H*d,) q then k bias of a layer (fused or separate), or None."""
    if not slot.qk_biases:
        return None
    bias = torch.cat([b.detach().flatten() for b in slot.qk_biases])
    return bias if len(bias) == 2 * slot.heads * slot.dim_head else None


def layer_maps(slot: AttentionSlot, x: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T * scale) of one layer on its Q/K input x (B, T, D): (B, H, T, T), in x's dtype
    (float32 at least) on x's device. Free (Model III) layers ignore x and give their (1, H, N, N) maps.
    """
    with torch.no_grad():
        if slot.free is not None:
            return slot.free.maps().float()[None]
        x = x if x.dtype == torch.float64 else x.float()
        weight = torch.cat([slot.q_weight, slot.k_weight]).to(x)  # (2*H*d, D)
        qk = x @ weight.T  # (B, T, 2*H*d)
        bias = qk_bias(slot)
        if bias is not None:
            qk = qk + bias.to(x)
        batch, tokens, _ = qk.shape
        q, k = qk.reshape(batch, tokens, 2, slot.heads, slot.dim_head).permute(2, 0, 3, 1, 4)  # (B, H, T, d)
        if slot.qk_norms:  # timm's qk_norm
            q_norm, k_norm = slot.qk_norms
            q, k = q_norm(q.to(q_norm.weight)).to(q), k_norm(k.to(k_norm.weight)).to(k)
        return torch.softmax(q @ k.transpose(-2, -1) * slot.scale, dim=-1)


def map_statistics(maps: torch.Tensor, targets: Targets | None, grid) -> dict[str, list[float]]:
    """Per head, averaged over images and patch rows: target mass, argmax agreement (rows whose target
    is inside the grid), row entropy / log(keys), mean attention distance in patches (patch keys);
    with prefix tokens, the mass patch rows put on them and the entropy of their own rows.

    maps (B, H, T, T): the last N = rows * cols tokens are the patches, any before them prefix tokens.
    """
    patches = grid[0] * grid[1]
    rows = maps[..., -patches:, :]  # (B, H, N, T)
    entropy = -(rows * rows.clamp_min(1e-30).log()).sum(-1) / math.log(maps.shape[-1])
    coords = grid_coords(grid).to(maps)
    distance = torch.cdist(coords, coords)  # (N, N) in patches
    stats = {
        "entropy": entropy.mean(dim=(0, 2)).tolist(),
        "distance": (rows[..., -patches:] * distance).sum(-1).mean(dim=(0, 2)).tolist(),
    }
    prefix = maps.shape[-1] - patches
    if prefix:  # class / register / distillation tokens: what patches give them, what they look at
        prefix_rows = maps[..., :prefix, :]  # (B, H, P, T)
        prefix_entropy = -(prefix_rows * prefix_rows.clamp_min(1e-30).log()).sum(-1) / math.log(
            maps.shape[-1]
        )
        stats["prefix_key_mass"] = rows[..., :prefix].sum(-1).mean(dim=(0, 2)).tolist()
        stats["prefix_row_entropy"] = prefix_entropy.mean(dim=(0, 2)).tolist()
    if targets is not None:
        keys = (targets.keys + (maps.shape[-1] - patches)).to(maps.device)  # (H, N) token of each target
        inside = targets.inside.to(maps)
        hit = rows.gather(-1, keys[..., None].expand(*rows.shape[:-1], 1))[..., 0]  # (B, H, N)
        agree = (rows.argmax(-1) == keys).to(maps)
        stats["mass"] = ((hit * inside).sum(-1) / inside.sum(-1).clamp_min(1)).mean(0).tolist()
        stats["argmax_agreement"] = ((agree * inside).sum(-1) / inside.sum(-1).clamp_min(1)).mean(0).tolist()
        stats.update(row_figures(rows, keys, targets.inside))
    return stats


def layer_quality(slot: AttentionSlot, x: torch.Tensor | None, offsets: Sequence[Offset] | None) -> dict:
    """One layer's entry of a real-pass report: per head statistics of its maps on Q/K input x."""
    targets = None if offsets is None else Targets.build(list(offsets), slot.grid)
    stats = map_statistics(layer_maps(slot, x), targets, slot.grid)
    heads = [{"head": h, **{key: values[h] for key, values in stats.items()}} for h in range(slot.heads)]
    return {"layer": slot.layer, "qk_input": slot.real_input, "heads": heads}


def real_pass_summary(layers: list[dict], images: int, qk_input: str) -> dict[str, Any]:
    """The report of `layer_quality` entries: their per-head means, the image count, the Q/K input."""
    every = [h for layer in layers for h in layer["heads"]]
    means = {f"mean_{key}": sum(h[key] for h in every) / len(every) for key in every[0] if key != "head"}
    if "worst_row_mass" in every[0]:  # the one head and row furthest from a convolution
        means["min_worst_row_mass"] = min(h["worst_row_mass"] for h in every)
    return {"images": images, "qk_input": qk_input, **means, "layers": layers}


def check_images(images: torch.Tensor) -> None:
    if images.dim() != 4 or len(images) == 0:
        raise ConfigError(f"images must be a non-empty (B, C, H, W) batch, got shape {tuple(images.shape)}")


def real_pass_quality(
    model: nn.Module,
    slots: Sequence[AttentionSlot],
    images: torch.Tensor,
    offsets: Sequence[Sequence[Offset]] | None = None,
) -> dict[str, Any]:
    """Per layer and head statistics of the maps on real `images` (one pass, block by block), with
    their means. offsets[l][h]: the target offset of head h in layer l (impulse); without it no mass
    or agreement. Maps in float32: against float64 the means differ by < 1e-4 (tests/init)."""
    check_images(images)
    layers = []
    with BlockRunner(model, slots, images) as runner:
        for index, slot in enumerate(slots):
            x = None if slot.free is not None else runner.qk_input(index)
            layers.append(layer_quality(slot, x, None if offsets is None else offsets[index]))
            if index + 1 < len(slots):
                runner.advance(index)
    return real_pass_summary(layers, len(images), slots[0].real_input)


def images_for(tokens: int, grid, images: torch.Tensor) -> torch.Tensor:
    """The first images of the batch holding about `tokens` patch tokens (at least one image)."""
    return images[: max(1, -(-tokens // (grid[0] * grid[1])))]


def untargeted_real_pass(model: nn.Module, images: torch.Tensor) -> dict[str, Any] | None:
    """Entropy and attention distance on real images for any scheme (no targets), on the first images
    holding MEASURE_TOKENS patch tokens, or None for models whose attention the init schemes do not
    reach (e.g. ConvMixer, a ViT converted to GPSA in every block)."""
    try:
        slots = attention_slots(model, "measure")
    except ConfigError:
        return None
    if not slots:
        return None
    check_images(images)
    return real_pass_quality(model, slots, images_for(MEASURE_TOKENS, slots[0].grid, images))


def check_held_out(held_out: float, scheme: str) -> None:
    """held_out is a share of the image batch: in [0, 1) (1 would leave nothing to fit or measure on)."""
    if not 0.0 <= held_out < 1.0:
        raise ConfigError(f"{scheme} held_out must be in [0, 1), got {held_out!r}")


def split_batch(images: torch.Tensor, held_out: float, grid) -> tuple[torch.Tensor, torch.Tensor]:
    """(images fitted on, images held apart): the last `held_out` share of the batch (at least one
    image when held_out > 0 and the batch has two) is held apart; of each part, the first images
    holding FIT_TOKENS (fitted) and MEASURE_TOKENS (held apart) patch tokens are used."""
    check_images(images)
    held = min(len(images) - 1, max(1, round(held_out * len(images)))) if held_out > 0 else 0
    cut = len(images) - held
    return images_for(FIT_TOKENS, grid, images[:cut]), images[cut:][
        : len(images_for(MEASURE_TOKENS, grid, images[cut:]))
    ]


def real_pass_measured(
    model: nn.Module, slots: list, images: torch.Tensor, held_out: float
) -> dict[str, Any]:
    """`real_pass` and `real_pass_held_out` split and measured as impulse's are, without targets: the
    batch's last `held_out` share is the held-apart part (impulse fits on the rest; a scheme that fits on
    no images measures both parts alike, so that every scheme reports the same figures on the same
    images); none for a model with no attention layer left (`initialize` says so in the report)."""
    if not slots:
        return {}
    first, held = split_batch(images, held_out, slots[0].grid)
    measured = images_for(MEASURE_TOKENS, slots[0].grid, first)
    reports = {"real_pass": real_pass_quality(model, slots, measured)}
    if len(held):
        reports["real_pass_held_out"] = real_pass_quality(model, slots, held)
    return reports
