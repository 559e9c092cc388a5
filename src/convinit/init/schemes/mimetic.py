"""Mimetic initialisation (Trockman & Kolter 2023), the baseline of paper 1 (docs/method.md §4).

Pretrained ViTs have Wq_h Wk_h^T close to a positive multiple of I plus noise, and Wv Wproj close to a
negative multiple of I. Mimetic init builds those products directly and factors them by SVD:

    Wq_h Wk_h^T ~ a1 * Z1 + b1 * I   per head, rank d = dim_head (a1 = b1 = 0.7)
    Wv Wproj   ~ a2 * Z2 - b2 * I   over all heads at once, rank H*d (a2 = b2 = 0.4)

with Z uniform of variance 1/D, left factor U sqrt(S) and right factor sqrt(S) V^T. On a blend
(Model I/II) layer the Q/K input contains P, so the map starts near softmax(b1 * P P^T * scale):
peaked on each patch and its neighbours. For Model III (qk_input "free") there is no Wq, Wk: the same
recipe is applied in token space, Q_h K_h ~ a1 * Z1 + b1 * I (N x N, Z of variance 1/N), rank r.
Paper 1's tables were made with a weaker variant (`variant="paper1"`, official `vit.py`, docs/method.md §4):
Q/K only (V/proj keep their default init), W_h = 0.7 * sqrt(1/D) * U(-1, 1) + 0.7 * I, i.e. noise of
variance 1/(3D) instead of 1/D, drawn for all heads at once, rank-d SVD factors.
Works on the models `convinit.init.attention_sites.attention_slots` supports (timm-layout ViTs: the q/k
biases are set to 0, the v/proj biases are left alone).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.attention_sites import AttentionSlot, attention_slots, check_scheme_applies, rms, write_qk
from convinit.init.measure import HELD_OUT, check_held_out, real_pass_measured
from convinit.init.positions import repair_unset
from convinit.init.registry import register_scheme

VARIANTS = ("trockman_kolter", "paper1")
QK_CONSTANTS = (0.7, 0.7)  # a1, b1
VALUE_CONSTANTS = (0.4, 0.4)  # a2, b2


def uniform_unit_variance(size: int, generator: torch.Generator | None) -> torch.Tensor:
    """Z (size, size) uniform with variance 1/size: U(-sqrt(3/size), sqrt(3/size))."""
    bound = math.sqrt(3.0 / size)
    return (torch.rand(size, size, generator=generator, dtype=torch.float64) * 2 - 1) * bound


def svd_factors(product: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """left (n, rank), right (rank, n) with left @ right the best rank-`rank` approximation of product.

    left = U sqrt(S), right = sqrt(S) V^T; a rank above n is zero-padded.
    """
    u, s, vh = torch.linalg.svd(product)
    keep = min(rank, len(s))
    root = s[:keep].sqrt()
    left = torch.zeros(product.shape[0], rank, dtype=product.dtype)
    right = torch.zeros(rank, product.shape[1], dtype=product.dtype)
    left[:, :keep] = u[:, :keep] * root
    right[:keep] = root[:, None] * vh[:keep]
    return left, right


def mimetic_qk(slot: AttentionSlot, a1: float, b1: float, generator: torch.Generator | None) -> None:
    """Per head Wq_h Wk_h^T ~ a1 Z + b1 I (or Q_h K_h in token space for Model III)."""
    if slot.free is not None:
        tokens = slot.free.tokens
        with torch.no_grad():
            for head in range(slot.heads):
                product = a1 * uniform_unit_variance(tokens, generator) + b1 * torch.eye(
                    tokens, dtype=torch.float64
                )
                left, right = svd_factors(product, slot.dim_head)
                slot.free.q_factors[head] = left.to(slot.free.q_factors)
                slot.free.k_factors[head] = right.to(slot.free.k_factors)
        return
    dim = slot.q_weight.shape[1]
    wq, wk = [], []
    for _ in range(slot.heads):
        product = a1 * uniform_unit_variance(dim, generator) + b1 * torch.eye(dim, dtype=torch.float64)
        left, right = svd_factors(product, slot.dim_head)  # (D, d), (d, D)
        wq.append(left)
        wk.append(right.T)
    write_qk(slot, torch.stack(wq), torch.stack(wk))  # (H, D, d) each; also zeroes q/k biases


def mimetic_value_proj(
    slot: AttentionSlot, a2: float = VALUE_CONSTANTS[0], b2: float = VALUE_CONSTANTS[1], generator=None
) -> None:
    """Wv Wproj ~ a2 Z - b2 I over all heads (x -> x Wv Wproj is the layer's value path)."""
    dim = slot.v_weight.shape[1]
    inner = slot.v_weight.shape[0]
    product = a2 * uniform_unit_variance(dim, generator) - b2 * torch.eye(dim, dtype=torch.float64)
    left, right = svd_factors(product, inner)  # (D, H*d), (H*d, D)
    with torch.no_grad():
        slot.v_weight.copy_(left.T.to(slot.v_weight))  # to_v weight is (H*d, D): v = x @ weight.T
        slot.out_weight.copy_(right.T.to(slot.out_weight))  # to_out weight is (D, H*d)


def paper1_qk(slot: AttentionSlot, generator: torch.Generator | None) -> None:
    """Paper 1's mimetic Q/K: W = 0.7 sqrt(1/n) U(-1, 1) + 0.7 I per head (n = D, or N for Model III)."""
    n = slot.free.tokens if slot.free is not None else slot.q_weight.shape[1]
    noise = 2 * torch.rand(slot.heads, n, n, generator=generator, dtype=torch.float64) - 1
    product = 0.7 * math.sqrt(1 / n) * noise + 0.7 * torch.eye(n, dtype=torch.float64)
    factors = [svd_factors(product[h], slot.dim_head) for h in range(slot.heads)]  # (n, d), (d, n)
    if slot.free is not None:
        with torch.no_grad():
            slot.free.q_factors.copy_(torch.stack([left for left, _ in factors]))
            slot.free.k_factors.copy_(torch.stack([right for _, right in factors]))
        return
    write_qk(slot, torch.stack([left for left, _ in factors]), torch.stack([right.T for _, right in factors]))


def check_mimetic_options(options: dict[str, Any]) -> None:
    """The values of mimetic's options that their types let through (run by `init_spec`)."""
    if "variant" in options and options["variant"] not in VARIANTS:
        raise ConfigError(f"mimetic variant must be one of {', '.join(VARIANTS)}, got {options['variant']!r}")
    if "held_out" in options:
        check_held_out(options["held_out"], "mimetic")


@register_scheme("mimetic", check=check_mimetic_options, needs_attention=True)
def mimetic_init(
    model: nn.Module,
    *,
    a1: float = QK_CONSTANTS[0],
    b1: float = QK_CONSTANTS[1],
    a2: float = VALUE_CONSTANTS[0],
    b2: float = VALUE_CONSTANTS[1],
    value_proj: bool | None = None,
    variant: str = "trockman_kolter",
    seed: int | None = None,
    images: torch.Tensor | None = None,
    held_out: float = HELD_OUT,
) -> dict[str, Any]:
    """Mimetic init of every attention layer (docs/method.md §4).

    variant "trockman_kolter" (a1, b1, a2, b2; V/proj too unless value_proj=False) or "paper1" (Q/K
    only, noise variance 1/(3D), the baseline paper 1's tables used). Reports per layer the rms of the
    new Q/K and V weights, for comparison with other schemes; with `images`, the same real-pass figures
    as impulse (`real_pass`, `real_pass_held_out`: see `init.measure.real_pass_measured`).
    """
    if value_proj is None:  # option values checked by `initialize` (init_spec: check_mimetic_options)
        value_proj = variant == "trockman_kolter"
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    check_scheme_applies(model, "mimetic")  # none left: refused, as by `initialize`
    slots = attention_slots(model, "mimetic")
    repaired = repair_unset(model)  # timm's weight_init="skip" leaves pos_embed and tokens unset
    layers = []
    for slot in slots:
        if variant == "paper1":
            paper1_qk(slot, generator)
        else:
            mimetic_qk(slot, a1, b1, generator)
        if value_proj:
            mimetic_value_proj(slot, a2, b2, generator)
        qk = (
            [slot.free.q_factors, slot.free.k_factors]
            if slot.free is not None
            else [slot.q_weight, slot.k_weight]
        )
        layers.append(
            {"layer": slot.layer, "qk_rms": sum(rms(t) for t in qk) / 2, "v_rms": rms(slot.v_weight)}
        )
    constants = (
        {"a1": a1, "b1": b1, "a2": a2, "b2": b2} if variant == "trockman_kolter" else {"a1": 0.7, "b1": 0.7}
    )
    report = {"variant": variant, "constants": constants, "value_proj": value_proj, "layers": layers}
    if images is not None:
        report.update(real_pass_measured(model, slots, images, held_out))
    return {**report, "repaired": repaired} if repaired else report
