"""Impulse initialisation: attention maps that start as random impulse convolutions (docs/method.md §3).

Each head h of each layer gets a k x k impulse filter, i.e. an offset (dy, dx), and its N x N
convolution matrix T_h is the target map (`convinit.init.targets`). Q/K weights are chosen so that
softmax(X Wq_h Wk_h^T X^T * scale) ~ T_h on what the layer sees. Two solvers:

- `closed_form` (default; `convinit.init.closed_form`): the follow-up paper's closed form, fitted in
  the directions where position outweighs image content, so that the maps survive real images. Given
  `images`, layer by layer on the Q/K input the layer really receives from them (after the layers
  before it are initialised); without images on the pseudo-input (P for blend models, LN(P) as a
  proxy for a standard ViT) with isotropic content of the model's alpha. The logit gap c is per head
  the smallest whose maps put `target_mass` on the target (on the real batch when there is one), or
  97 % of the best mass reachable; `logit_gap` fixes it. Columns beyond the kept rank get small noise.
- `optimize` (`convinit.init.paper_optimizer`): paper 1's recipe exactly, on P (or LN(P)), at scale
  0.1; a model built with that attention scale (model_args.attn_scale=0.1, as the official code) takes
  the weights as fitted, one at another scale gets them times sqrt(0.1 / layer scale), with a warning.

Model III layers (qk_input "free") have no X: `optimize` fits the factors directly (X = I) and
`closed_form` sets an exact rank-3 factorisation of -gap * ||key - query - o||^2.

Given `images`, the last `held_out` share of the batch (a quarter) is held apart from the fit. The
layers are fitted in order on the model's blocks run one at a time (`convinit.init.block_runner`: one
block pass per layer, the residual stream kept), on the first images holding FIT_TOKENS patch tokens;
the logit gap is searched on the first of them holding GAP_ENTRIES attention entries per head (all
images fitted on for a 7x7 grid, 4 images for a 16x16 one: its cost grows as images x N^2, and a per-head
scalar averaged over that many rows is settled). Each layer is measured once final.

The report keeps the pseudo-input figures (`mean_mass`, ..., labelled by `evaluated_on`) and, when
`images` are given, adds `real_pass` (the images fitted on) and `real_pass_held_out` (the images held
apart), the figures of real forward passes (`convinit.init.measure`), each on the first images of its
part holding MEASURE_TOKENS patch tokens.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.init.attention_sites import (
    AttentionSlot,
    attention_slots,
    check_scheme_applies,
    position_table,
    qk_parameters,
    rms,
    write_qk,
)
from convinit.init.block_runner import BlockRunner
from convinit.init.closed_form import InputStatistics, SignalBasis, closed_form_factors, quadratic_factors
from convinit.init.measure import (
    HELD_OUT,
    LOW_MASS,
    MEASURE_TOKENS,
    check_held_out,
    images_for,
    layer_quality,
    real_pass_summary,
    split_batch,
)
from convinit.init.paper_optimizer import optimize_factors
from convinit.init.positions import POS_EMBED_SCALE, POSITION_MODES, check_pos_embed_scale, prepare_positions
from convinit.init.registry import register_scheme
from convinit.init.schemes.mimetic import mimetic_value_proj
from convinit.init.targets import Targets, layer_offsets, map_quality, row_figures, smallest_gap
from convinit.models.filters import check_kernel_fits, check_kernel_size
from convinit.models.vit import SimpleViT

REST_STD = 0.02  # noise on the Q/K columns a closed form leaves unused (exact zeros never train)
GAP_ENTRIES = 2**18  # attention entries per head (images x N x N) the logit gap is searched on
SOLVERS = ("closed_form", "optimize")
OFFSET_MODES = ("random", "centre_first")
PSEUDO_INPUTS = ("P", "LN(P)")
TARGET_SHAPES = ("best", "impulse", "bump")  # best: per head, whichever of the two has the better worst row
# the largest logit gap: at a gap of 1e4 every off-target weight is exp(-1e4) = 0 in any float format,
# so a larger one changes no map and only inflates the Q/K weights (logit_gap=1e30 diverges at step 1)
MAX_GAP = 1e4

__all__ = ["Targets", "impulse_init", "layer_offsets", "map_quality", "optimize_factors"]


@dataclass
class ImpulseOptions:
    """The scheme's options (see `impulse_init`), checked once."""

    solver: str = "closed_form"
    kernel_size: int = 5
    offsets: str = "random"
    share_offsets: bool = False
    pseudo_input: str | None = None
    logit_gap: float | None = None
    target_mass: float = 0.8
    target_shape: str = "best"
    bump_width: float = 1.5
    max_gap: float = MAX_GAP
    min_snr: float = 1.0
    content_floor: float = 0.03
    rcond: float = 1e-3
    noise: float = 0.0
    steps: int = 10_000
    lr: float = 1e-4
    scale: float = 0.1
    renorm_every: int = 100
    value_init: str = "default"
    held_out: float = HELD_OUT
    learned_pos_embed: str = "auto"  # scale; keep where a converted blend projects content out of Q/K
    pos_embed_scale: float = POS_EMBED_SCALE

    def __post_init__(self) -> None:
        check_kernel_size(self.kernel_size)
        choices = {
            "solver": SOLVERS,
            "offsets": OFFSET_MODES,
            "value_init": ("default", "mimetic"),
            "learned_pos_embed": ("auto", *POSITION_MODES),
            "target_shape": TARGET_SHAPES,
        }
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
        for key in ("max_gap", "rcond", "lr", "scale", "pos_embed_scale", "bump_width"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"impulse {key} must be > 0, got {getattr(self, key)!r}")
        check_pos_embed_scale(self.pos_embed_scale, "impulse")
        if self.max_gap > MAX_GAP:
            raise ConfigError(
                f"impulse max_gap must be at most {MAX_GAP:g} (a larger gap changes no map), "
                f"got {self.max_gap!r}"
            )
        for key in ("min_snr", "content_floor"):
            if not getattr(self, key) >= 0:
                raise ConfigError(f"impulse {key} must be >= 0, got {getattr(self, key)!r}")
        if self.logit_gap is not None and not 0 < self.logit_gap <= self.max_gap:
            raise ConfigError(
                f"impulse logit_gap must be in (0, max_gap={self.max_gap:g}] (or null to reach target_mass; "
                f"a larger gap changes no map and only inflates the weights), got {self.logit_gap!r}"
            )
        check_held_out(self.held_out, "impulse")
        if self.steps < 0 or self.renorm_every < 0:
            raise ConfigError("impulse steps and renorm_every must be >= 0")


def fit_every_layer(
    model: nn.Module,
    slots: list,
    opts: ImpulseOptions,
    images: torch.Tensor | None,
    shared: list | None,
    generator: torch.Generator | None,
) -> tuple[list, list, list, int, int]:
    """Fit the layers in forward order, each on the Q/K input it really receives once the layers before
    it are final (`BlockRunner`), and measure each right after its fit on the fitted and the held-apart
    images: (per-layer fits, figures on the fitted images, on the held-apart ones, images measured,
    images held apart)."""
    cache = FitCache()
    fitted, held = (None, None) if images is None else split_batch(images, opts.held_out, slots[0].grid)
    runner = None if images is None else BlockRunner(model, slots, torch.cat([fitted, held]))
    measured = 0 if images is None else len(images_for(MEASURE_TOKENS, slots[0].grid, fitted))
    layers, on_fitted, on_held = [], [], []
    try:
        for index, slot in enumerate(slots):
            offsets = shared or layer_offsets(
                opts.offsets, opts.kernel_size, slot.layer, slot.heads, generator
            )
            x = None if runner is None or slot.free is not None else runner.qk_input(index)  # (B, T, D)
            real = x[: len(fitted)] if x is not None and opts.solver == "closed_form" else None
            layers.append(init_layer(slot, Targets.build(offsets, slot.grid), opts, cache, generator, real))
            if runner is not None:  # the layer is final: measure it on both parts, then run it
                on_fitted.append(layer_quality(slot, None if x is None else x[:measured], offsets))
                on_held.append(layer_quality(slot, None if x is None else x[len(fitted) :], offsets))
                if index + 1 < len(slots):
                    runner.advance(index)
    finally:
        if runner is not None:
            runner.close()
    return layers, on_fitted, on_held, measured, 0 if held is None else len(held)


def table_mode(mode: str, slots: list) -> str:
    """What learned_pos_embed="auto" does to the model's table: "scale", and "keep" on a model converted
    to paper 1's blend with content projection (`convinit.models.convert`). The projector removes the
    fitted directions from LN(x), so a fit on a x18 table inside LN(x) would go with them (held-out target
    mass 0.02 after it, against 0.95 with the table kept and position reaching Q/K through P; docs/method.md
    §9)."""
    if mode != "auto":
        return mode
    projects = any(slot.forms_qk_input and slot.module.content_projector is not None for slot in slots)
    return "keep" if projects else "scale"


@register_scheme("impulse", options=ImpulseOptions, needs_attention=True)
def impulse_init(
    model: nn.Module,
    *,
    sincos_pos_embed: bool = False,
    seed: int | None = None,
    images: torch.Tensor | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Initialise every attention layer's maps to random impulse convolutions (docs/method.md §3).

    Options (`ImpulseOptions`): solver "closed_form" | "optimize"; kernel_size (5, paper 1); offsets
    "random" (paper 1: uniform over the k*k taps) | "centre_first"; share_offsets (False: fresh filters
    per layer); pseudo_input "P" | "LN(P)" (None: what the layer sees, with isotropic content of its
    alpha; given: that input alone, no content modelled). Closed form: logit_gap, target_mass (0.8),
    max_gap, min_snr (kept directions carry at least this much more position than content, 1),
    content_floor (content variance assumed in every direction, for the content training may bring:
    it bounds the weights, 0.03), rcond (1e-3), noise (off-target logit noise, 0). Optimise: steps
    (10,000), lr (1e-4), scale (0.1), renorm_every (100). value_init "mimetic" also sets V/proj
    mimetic-style (follow-up paper: kernel_size=3, offsets="centre_first", value_init="mimetic").
    `seed` makes offsets and optimiser starts reproducible. learned_pos_embed "scale" (x pos_embed_scale,
    18) | "sincos" | "keep": what is done first to a timm or transformers model's learned position
    table (`convinit.init.positions`; `sincos_pos_embed=True` is learned_pos_embed="sincos"); "auto"
    (default): "scale", or "keep" (`table_mode`).
    `images`, a (B, C, H, W) batch preprocessed as for
    evaluation: the closed form fits on the Q/K input the layers really see, and the report gains
    `real_pass` / `real_pass_held_out` (figures of real forward passes on the images fitted on / on
    the last `held_out` share of the batch, 0.25; 0 fits on all and measures only those).

    Reports per layer and head: offset, logit gap, and on the pseudo-input: target mass, argmax
    agreement, MSE against T; per layer the Q/K weight scale (rms / rms of the default init).
    """
    sincos = {"learned_pos_embed": "sincos"} if sincos_pos_embed else {}
    opts = ImpulseOptions(**{**options, **sincos})  # names already checked by `initialize` (init_spec)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    check_scheme_applies(model, "impulse")  # none left: refused, as by `initialize`
    slots = attention_slots(model, "impulse")  # refuses unsupported models before any change
    check_kernel_fits(opts.kernel_size, slots[0].grid, "impulse kernel_size")  # before any offset is listed
    repeats = repeated_offsets_note(slots[0].heads, opts)
    if repeats is not None:
        warnings.warn(f"impulse init: {repeats}", stacklevel=3)  # initialize's caller
    position = None
    if position_table(model) is not None or not isinstance(model, SimpleViT):
        position = prepare_positions(model, table_mode(opts.learned_pos_embed, slots), opts.pos_embed_scale)
        slots = attention_slots(model, "impulse")  # the pseudo-inputs of the prepared table
    require_positions(slots[0])
    shared = None  # share_offsets: one draw (random) or the order restarted (centre_first) in every layer
    if opts.share_offsets:
        shared = layer_offsets(opts.offsets, opts.kernel_size, 0, slots[0].heads, generator)
    layers, on_fitted, on_held, measured, held_count = fit_every_layer(
        model, slots, opts, images, shared, generator
    )
    report = summarise(layers, slots[0], opts)
    if repeats is not None:
        report["offsets_note"] = repeats
    if position is not None:
        report["position"] = position
    if images is not None:
        report.update(real_pass_fitted(slots[0], on_fitted, measured, on_held, held_count))
    return report


def require_positions(slot: Any) -> None:
    """Impulse maps are positional: a model whose attention input carries no position cannot take them."""
    if slot.free is None and slot.seen is None:
        raise ConfigError(
            "impulse init needs position information in the attention input, but this model has none "
            "(convinit: qk_input='x' with pos_embed='none', use pos_embed: input or qk_input: blend; timm: "
            "pos_embed='none', build it with pos_embed='learn')"
        )


def repeated_offsets_note(heads: int, opts: ImpulseOptions) -> str | None:
    """The one line on a layer with more heads than the kernel has taps (docs/method.md §3.1), or None.

    Offsets then repeat within every layer, and heads with the same offset get the same target map:
    "random" draws with replacement (as it always does), "centre_first" uses every tap once and wraps.
    Nothing is refused: such heads still differ in their value and output weights."""
    k, taps = opts.kernel_size, opts.kernel_size**2
    if heads <= taps:
        return None
    how = (
        f"the centre-first order wraps, head h + {taps} taking head h's offset"
        if opts.offsets == "centre_first"
        else "offsets are drawn with replacement"
    )
    enough = math.ceil(math.sqrt(heads)) | 1  # the smallest odd kernel with a tap per head
    return (
        f"{heads} heads on a {k}x{k} kernel's {taps} taps: at least {heads - taps} heads per layer share an "
        f"offset with another and start with its attention map ({how}); kernel_size={enough} has a tap "
        "per head"
    )


def real_pass_fitted(
    slot: AttentionSlot, on_fitted: list[dict], fitted: int, on_held: list[dict], held: int
) -> dict[str, Any]:
    """`real_pass` (the images fitted on) and `real_pass_held_out` (the images held apart, if any),
    with a warning when the maps are not convolutions (judged on the held-apart images when there are)."""
    reports = {"real_pass": real_pass_summary(on_fitted, fitted, slot.real_input)}
    if held:
        reports["real_pass_held_out"] = real_pass_summary(on_held, held, slot.real_input)
    judged = reports.get("real_pass_held_out", reports["real_pass"])
    if judged["mean_mass"] < LOW_MASS:
        where = "held-apart images" if held else "images"
        reports["real_pass"]["warning"] = (
            f"on real {where} the maps put only {judged['mean_mass']:.2f} of their mass on the target offset "
            f"(below {LOW_MASS}): image content in the Q/K input ({slot.real_input}) outweighs position, "
            f"so the layers do not start as convolutions"
        )
        warnings.warn(f"impulse init: {reports['real_pass']['warning']}", stacklevel=4)  # initialize's caller
    return reports


def init_layer(
    slot: AttentionSlot, targets: Targets, opts: ImpulseOptions, cache: FitCache, generator, real
) -> dict[str, Any]:
    """Fit one layer (and its V/proj when value_init is mimetic); its report entry."""
    gaps, shapes = fit_slot(slot, targets, opts, cache, generator, real)
    weight_scale = sum(rms(p) for p in qk_parameters(slot)) / 2 / slot.default_rms
    if opts.value_init == "mimetic":
        mimetic_value_proj(slot, generator=generator)
    quality = map_quality(pseudo_input_maps(slot), targets)
    heads = [
        {
            "head": h,
            "offset": list(targets.offsets[h]),
            "logit_gap": None if gaps is None else float(gaps[h]),
            **({} if shapes is None else {"target_shape": shapes[h]}),
            **{key: values[h] for key, values in quality.items()},
        }
        for h in range(slot.heads)
    ]
    return {"layer": slot.layer, "weight_scale": weight_scale, "heads": heads}


@dataclass
class FitCache:
    """What fits without real images can share between layers: bases of equal inputs, gaps of equal fits.

    Layers of a fresh model see equal position-only inputs, so a head with an offset some earlier head
    already had (same input, same scale) gets the same factors and the same gap: found once.
    """

    inputs: list[torch.Tensor] = field(default_factory=list)
    bases: dict[tuple, SignalBasis] = field(default_factory=dict)
    gaps: dict[tuple, float] = field(default_factory=dict)

    def input_id(self, x: torch.Tensor) -> int:
        for index, seen in enumerate(self.inputs):
            if seen.shape == x.shape and torch.equal(seen, x):
                return index
        self.inputs.append(x)
        return len(self.inputs) - 1


def layer_gaps(unit_logits, targets: Targets, opts: ImpulseOptions, cache: FitCache, key) -> torch.Tensor:
    """Per-head logit gaps: the fixed `logit_gap`, or the smallest reaching `target_mass` (cached).

    unit_logits(heads) gives those heads' (..., h, N, N) logits at gap 1. A fit without real images is
    a function of its input, scale and offset only (when no noise is drawn), so `key` + offset
    identifies it across layers; key None: no caching (fits on real images).
    """
    heads = len(targets.offsets)
    if opts.logit_gap:
        return torch.full((heads,), float(opts.logit_gap), dtype=torch.float64)
    if opts.noise or key is None:
        return smallest_gap(unit_logits(list(range(heads))), targets, opts.target_mass, opts.max_gap)
    keys = [(*key, offset) for offset in targets.offsets]
    todo = sorted({keys.index(k) for k in keys if k not in cache.gaps})  # first head of each new fit
    if todo:
        found = smallest_gap(unit_logits(todo), targets.select(todo), opts.target_mass, opts.max_gap)
        cache.gaps.update({keys[h]: gap for h, gap in zip(todo, found.tolist(), strict=True)})
    return torch.tensor([cache.gaps[k] for k in keys], dtype=torch.float64)


def fit_inputs(slot: AttentionSlot, opts: ImpulseOptions, cache: FitCache, real) -> tuple:
    """(basis, input the gap is searched on (..., N, D), cache key) for a closed-form fit."""
    patches = slot.grid[0] * slot.grid[1]
    if real is not None:
        x = real[:, -patches:].double().cpu()  # (B, N, D) patch tokens
        basis = SignalBasis.of(InputStatistics.of_batch(x), opts.min_snr, opts.rcond, opts.content_floor)
        return basis, x[: max(1, GAP_ENTRIES // patches**2)], None
    # an explicit pseudo_input is fitted as it is; by default the layer's content share is modelled
    content, share = (0.0, 1.0) if opts.pseudo_input else (slot.content, slot.position_share)
    x_fit = slot.inputs[opts.pseudo_input or slot.seen].double() * share
    x_seen = slot.inputs[slot.seen].double() * share
    key = (cache.input_id(x_fit), content, opts.min_snr, opts.rcond, opts.content_floor)
    if key not in cache.bases:
        stats = InputStatistics.of_pseudo_input(x_fit, content)
        cache.bases[key] = SignalBasis.of(stats, opts.min_snr, opts.rcond, opts.content_floor)
    return cache.bases[key], x_seen, (*key, cache.input_id(x_seen), slot.scale)


def fit_slot(
    slot: AttentionSlot, targets: Targets, opts: ImpulseOptions, cache: FitCache, generator, real
) -> tuple[torch.Tensor | None, list[str] | None]:
    """Fit one layer and write its Q/K; returns the per-head logit gaps and target shapes (closed
    form) or None, None."""
    if slot.free is not None:
        return fit_free(slot, targets, opts, cache, generator), None
    if opts.solver == "optimize":
        x_fit = slot.inputs[opts.pseudo_input or slot.seen]
        wq, wk, _ = optimize_factors(x_fit, targets, slot.dim_head, opts.scale, opts.steps, opts.lr,
                                     opts.renorm_every, generator)  # fmt: skip
        factor = optimize_rescale(slot, opts)
        write_qk(slot, wq * factor, wk * factor)
        return None, None
    basis, x, key = fit_inputs(slot, opts, cache, real)
    if slot.qk_norms:  # one gain per layer: the one-hot target alone
        wq, wk, rank = closed_form_factors(basis, targets, slot.dim_head, slot.scale, opts.noise, generator)
        gaps = fit_qk_norm_gain(slot, x, fill_unused(wq, wk, rank, generator), targets, opts)
        write_qk(slot, wq, wk)
        return gaps, ["impulse"] * slot.heads
    wq, wk, rank, gaps, shapes = shaped_fit(slot, basis, x, targets, opts, cache, key, generator)
    root = gaps.sqrt()[:, None, None]
    wq, wk = fill_unused(wq * root, wk * root, rank, generator)
    write_qk(slot, wq, wk)
    return gaps, shapes


def unit_logits_of(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, scale: float):
    """heads -> those heads' (..., h, N, N) logits at gap 1 on x (..., N, D)."""

    def unit_logits(heads: list[int]) -> torch.Tensor:
        q = (x[..., None, :, :] @ wq[heads]) * scale
        return q @ (x[..., None, :, :] @ wk[heads]).transpose(-2, -1)

    return unit_logits


def shaped_fit(
    slot: AttentionSlot, basis, x: torch.Tensor, targets: Targets, opts: ImpulseOptions, cache, key, generator
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, list[str]]:
    """Closed-form factors aimed at the one-hot T, at a smooth bump around the target, or (best) per
    head at whichever puts more on the target at its worst in-grid row, both at the gap that reaches
    `target_mass` (docs/method.md §7): (Wq, Wk at gap 1, rank, gaps, shape per head)."""
    shapes = TARGET_SHAPES[1:] if opts.target_shape == "best" else (opts.target_shape,)
    heads = list(range(slot.heads))
    fits, worst = [], []
    for shape in shapes:
        aimed = targets if shape == "impulse" else targets.bump(opts.bump_width, slot.grid)
        wq, wk, rank = closed_form_factors(basis, aimed, slot.dim_head, slot.scale, opts.noise, generator)
        unit = unit_logits_of(x, wq, wk, slot.scale)
        gaps = layer_gaps(unit, targets, opts, cache, None if key is None else (*key, shape, opts.bump_width))
        fits.append((wq, wk, gaps))
        if len(shapes) > 1:
            maps = torch.softmax(gaps[:, None, None].to(x) * unit(heads), dim=-1)  # (..., H, N, N)
            worst.append(row_figures(maps, targets.keys, targets.inside)["worst_row_mass"])
    pick = torch.tensor(worst).argmax(0).tolist() if worst else [0] * slot.heads  # ties: the one-hot T
    wq, wk, gaps = (torch.stack([fits[pick[h]][i][h] for h in heads]) for i in range(3))
    return wq, wk, rank, gaps, [shapes[pick[h]] for h in heads]


def fill_unused(
    wq: torch.Tensor, wk: torch.Tensor, rank: int, generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns beyond the fitted rank would be stuck at 0 (zero gradient): small noise there."""
    for w in (wq, wk):
        w[..., rank:] = torch.randn(w[..., rank:].shape, generator=generator, dtype=w.dtype) * REST_STD
    return wq, wk


def fit_qk_norm_gain(
    slot: AttentionSlot, x: torch.Tensor, factors: tuple, targets: Targets, opts
) -> torch.Tensor:
    """timm's qk_norm: the logits are LN(q) . LN(k) * scale whatever the size of Wq, Wk, and their size
    comes from the norms' gains, one per layer (the norms are shared by the heads). The fitted
    directions set the pattern; the gain is the median over heads of the gap each head needs,
    written into both norms' weights (its square root each; biases 0). Returns the gap per head."""
    wq, wk = factors
    eps = float(getattr(slot.qk_norms[0], "eps", 1e-6))

    def normed(w: torch.Tensor) -> torch.Tensor:  # (..., H, N, d)
        return F.layer_norm(x[..., None, :, :] @ w, (slot.dim_head,), eps=eps)

    unit = normed(wq) @ normed(wk).transpose(-2, -1) * slot.scale
    gap = float(smallest_gap(unit, targets, opts.target_mass, opts.max_gap).median())
    with torch.no_grad():
        for norm in slot.qk_norms:
            norm.weight.fill_(math.sqrt(gap))
            if getattr(norm, "bias", None) is not None:
                norm.bias.zero_()
    return torch.full((slot.heads,), gap, dtype=torch.float64)


def optimize_rescale(slot: AttentionSlot, opts: ImpulseOptions) -> float:
    """Weight factor that makes the layer's own scale give the map fitted at `opts.scale`: 1 when the
    model is built with paper 1's attention scale (model_args.attn_scale=0.1), as the official code is.

    The scale is not a weight, so a checkpoint could not carry it: rather than setting it on the layer,
    a model at another scale gets its weights rescaled (the same maps at step 0, different training),
    with a warning.
    """
    if math.isclose(slot.scale, opts.scale):
        return 1.0
    if slot.layer == 0:
        warnings.warn(
            f"impulse solver=optimize fits at attention scale {opts.scale:g} but this model's layers use "
            f"{slot.scale:g}: weights rescaled by sqrt({opts.scale:g} / {slot.scale:g}); build the model "
            f"with model_args.attn_scale={opts.scale:g} to train as paper 1 does",
            stacklevel=5,
        )
    return math.sqrt(opts.scale / slot.scale)


def fit_free(
    slot: AttentionSlot, targets: Targets, opts: ImpulseOptions, cache: FitCache, generator
) -> torch.Tensor | None:
    """Model III: fit the factors directly (optimize, X = I) or set the rank-3 quadratic form."""
    free = slot.free
    if opts.solver == "optimize":
        wq, wk, _ = optimize_factors(torch.eye(free.tokens), targets, slot.dim_head, opts.scale, opts.steps,
                                     opts.lr, opts.renorm_every, generator)  # fmt: skip
        factor = optimize_rescale(slot, opts)
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


def pseudo_input_maps(slot: AttentionSlot) -> torch.Tensor:
    """The maps the layer produces on its position-only pseudo-input (or its free maps), (H, N, N)."""
    with torch.no_grad():
        if slot.free is not None:
            return slot.free.maps().double().cpu()
        x = slot.inputs[slot.seen].double()  # the solvers work on the CPU whatever the model's device
        q = (x @ slot.q_weight.double().cpu().T).reshape(len(x), slot.heads, slot.dim_head).transpose(0, 1)
        k = (x @ slot.k_weight.double().cpu().T).reshape(len(x), slot.heads, slot.dim_head).transpose(0, 1)
        return torch.softmax(q @ k.transpose(1, 2) * slot.scale, dim=-1)  # (H, N, N)


def summarise(layers: list[dict], slot: AttentionSlot, opts: ImpulseOptions) -> dict[str, Any]:
    heads = [h for layer in layers for h in layer["heads"]]

    def mean(key: str) -> float:
        return sum(h[key] for h in heads) / len(heads)

    evaluated_on = "free maps (Model III)" if slot.free is not None else f"pseudo-input {slot.seen_note}"
    return {
        "solver": opts.solver,
        "kernel_size": opts.kernel_size,
        "offsets": opts.offsets,
        "pseudo_input": None if slot.free is not None else opts.pseudo_input or slot.seen,
        "evaluated_on": evaluated_on,
        "mean_mass": mean("mass"),
        "mean_argmax_agreement": mean("argmax_agreement"),
        "mean_mse": mean("mse"),
        "mean_worst_row_mass": mean("worst_row_mass"),
        "mean_rows_on_target": mean("rows_on_target"),
        "min_worst_row_mass": min(h["worst_row_mass"] for h in heads),
        "mean_weight_scale": sum(layer["weight_scale"] for layer in layers) / len(layers),
        "layers": layers,
    }
