"""Both papers' architectures for the ViTs users bring: `convert(model, kind)` (docs/method.md §9).

A timm `VisionTransformer` (vit_*, deit_*, deit3_*, distilled, with register tokens or qk_norm) or a
transformers `ViTModel` / `ViTForImageClassification` keeps its embeddings, MLPs, norms and head; each
attention layer becomes a `PortedAttention` that computes it with the layer's own weights (under their own
names), records maps like convinit's layers, and in the converted blocks carries one of:

- "gpsa": ConViT's gated positional self-attention (docs/method.md §5) with convinit's GPSA code
  (`positional_maps`, `gated_output`): content attention from the layer's own Q/K, positional attention
  softmax(pos_proj(r)) over relative patch offsets with ConViT's local init and locality strength (and,
  as that init does, V = identity), one gate per head at sigmoid(1). The first `layers` blocks (default:
  ConViT's share of the depth, 10 of 12) are converted.
- "blend": paper 1's Models I/II (docs/method.md §2): Q/K see alpha * LN(x) + (1 - alpha) * P, V sees
  LN(x), P the fixed 2-D sin-cos embedding of the patch grid; every block by default. The model's own
  position table stays in the residual stream (impulse init scales it, as on the unconverted model), so a
  converted row differs from its unconverted twin by the blend alone. `content_projection=True` is the
  remedy of docs/method.md §8 (content enters Q/K only through directions it learns).
- "gpsa+blend": both in one model: GPSA in the first `layers` blocks (ConViT's share by default) and the
  blend, with its options, in every block after them, where ConViT keeps plain content attention. ConViT
  makes its early blocks local by architecture; the blend gives the blocks that stay attention a
  convolutional start that impulse init can fit (docs/method.md §9). On one block it is GPSA alone.

Prefix tokens (class, distillation, registers) come first in a timm or transformers ViT and a converted
model cannot move them (ConViT adds its class token after its GPSA blocks). So: a prefix token's query row
is content attention only (it has no offset to any patch), a patch query puts no positional weight on
prefix keys (they are at no offset), and in the blend a prefix token's Q/K input is alpha * LN(x) with no
P. With no prefix tokens a converted GPSA layer computes exactly what `convinit.models.gpsa.GPSA` does.

The model records its conversion in `model.conversion` (a dict), which export writes to config.json so
that `convinit.from_pretrained` converts the rebuilt model again before loading the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.models.gpsa import gated_output, positional_maps, relative_indices, write_local_init
from convinit.models.hf_layout import hf_grid, hf_layers, hf_projections, hf_vit_backbone
from convinit.models.layers import fitted_direction_projector, init_linear, posemb_sincos_2d, scaled_attention
from convinit.models.timm_layout import is_timm_layout, timm_grid

KINDS = ("gpsa", "blend", "gpsa+blend")
CONVIT_GPSA_SHARE = 10 / 12  # ConViT-Ti/S/B: 10 GPSA blocks of 12 (local_up_to_layer)
SUPPORTED = (
    "timm VisionTransformer (vit_*, deit_*, deit3_*, distilled, register tokens, qk_norm) and transformers "
    "ViTModel / ViTForImageClassification"
)


@dataclass(frozen=True)
class Conversion:
    """What `convert` does, as config.json and the training key `convert_args.*` state it."""

    kind: str
    # converted blocks, from the first (gpsa+blend: its GPSA blocks, the blend in the rest); None: gpsa
    # ConViT's share, blend all
    layers: int | None = None
    locality_strength: float = 1.0  # gpsa: ConViT's alpha, the sharpness of the local init
    local_init: bool = True  # gpsa: ConViT's local init (else pos_proj and V keep a random init)
    alpha: float = 0.5  # blend: the content's weight in the Q/K input (0.5 Model I, 0 Model II)
    content_projection: bool = False  # blend: docs/method.md §8's remedy

    def to_dict(self) -> dict[str, Any]:
        """The kind and its own options (what config.json records and `conversion_of` reads back)."""
        return {"kind": self.kind, **{name: getattr(self, name) for name in OPTIONS[self.kind]}}


OPTIONS = {
    "gpsa": ("layers", "locality_strength", "local_init"),
    "blend": ("layers", "alpha", "content_projection"),
    "gpsa+blend": ("layers", "locality_strength", "local_init", "alpha", "content_projection"),
}


def conversion_of(kind: Any, options: Any = None) -> Conversion:
    """The checked `Conversion` for `kind` and its options; ConfigError in one line naming what is wrong."""
    if kind not in KINDS:
        raise ConfigError(f"convert must be one of {', '.join(KINDS)} (got {kind!r})")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ConfigError(f"convert {kind} options must be a mapping of name: value, got {options!r}")
    unknown = sorted(set(options) - set(OPTIONS[kind]))
    if unknown:
        raise ConfigError(
            f"convert {kind} takes no option {unknown[0]!r}; it takes: {', '.join(OPTIONS[kind])}"
        )
    for name, value in options.items():
        check_option(kind, name, value)
    return Conversion(kind, **options)


def check_option(kind: str, name: str, value: Any) -> None:
    types = {f.name: f.type for f in fields(Conversion)}
    if name == "layers":
        if value is not None and (type(value) is not int or value < 1):
            raise ConfigError(
                f"convert {kind} layers must be a whole number of blocks, 1 or more, got {value!r}"
            )
    elif types[name] == "bool":
        if type(value) is not bool:
            raise ConfigError(f"convert {kind} {name} must be true or false, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"convert {kind} {name} must be a finite number, got {value!r}")
    elif name == "alpha" and not 0.0 <= value <= 1.0:
        raise ConfigError(f"convert blend alpha must be in [0, 1] (0.5 Model I, 0 Model II), got {value!r}")
    elif name == "locality_strength" and not 0.0 < value <= 100.0:
        raise ConfigError(f"convert gpsa locality_strength must be in (0, 100] (ConViT: 1), got {value!r}")


class PortedAttention(nn.Module):
    """A timm or transformers attention layer computed by convinit, weights under the layer's own names.

    `mode` "attention" computes what the layer computed; "gpsa" and "blend" are the conversions (module
    docstring). timm's layout keeps the fused `qkv`, `q_norm`, `k_norm`, `norm` and `proj`;
    transformers' keeps `q_proj`, `k_proj`, `v_proj`, `o_proj` (and 4.x's output dropout) and returns what
    the replaced layer returned: (output, None) in 5.x and early 4.x, the output alone in late 4.x.
    Records (B, H, T, T) maps when `record` is set (`convinit.models.layers.record_attention`).
    """

    def __init__(self, parts: dict[str, Any], grid: tuple[int, int], mode: str = "attention"):
        super().__init__()
        self.mode = mode
        self.num_heads = parts["heads"]
        self.head_dim = parts["dim_head"]
        self.kernel_head_dim: int | None = self.head_dim  # attends through scaled_attention
        self.scale = float(parts["scale"])
        self.attn_drop_p = float(parts.get("dropout", 0.0))
        self.transformers = parts["layout"] == "transformers"
        if self.transformers:
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (parts[k] for k in ("q", "k", "v", "out"))
            self.out_drop = parts.get("out_drop", nn.Identity())
            self.returns_tuple = bool(parts.get("returns_tuple", True))
        else:
            self.qkv, self.proj = parts["qkv"], parts["out"]
            self.q_norm, self.k_norm, self.norm = parts["q_norm"], parts["k_norm"], parts["norm"]
            self.proj_drop = parts["proj_drop"]
        self.grid = grid
        self.record = False
        self.attention_map: torch.Tensor | None = None
        self.alpha: float | None = None

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def dim(self) -> int:
        return (self.q_proj if self.transformers else self.qkv).in_features

    def weights(self) -> dict[str, torch.Tensor | None]:
        """Views of the q, k, v (H*d, D) and out (D, H*d) weights and the q/k biases (writable in place)."""
        if self.transformers:
            q, k, v, out = self.q_proj, self.k_proj, self.v_proj, self.o_proj
            return {"q": q.weight, "k": k.weight, "v": v.weight, "out": out.weight,
                    "q_bias": q.bias, "k_bias": k.bias, "v_bias": v.bias}  # fmt: skip
        w, b, inner = self.qkv.weight, self.qkv.bias, self.inner
        cut = (slice(0, inner), slice(inner, 2 * inner), slice(2 * inner, 3 * inner))
        views = {name: w[part] for name, part in zip("qkv", cut, strict=True)}
        biases = {
            f"{name}_bias": None if b is None else b[part] for name, part in zip("qkv", cut, strict=True)
        }
        return {**views, "out": self.proj.weight, **biases}

    def project(self, qk_input: torch.Tensor, v_input: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v, each (B, H, T, d), with the layer's own projections (and timm's qk_norm)."""
        batch, tokens, _ = v_input.shape
        if self.transformers:
            q, k, v = self.q_proj(qk_input), self.k_proj(qk_input), self.v_proj(v_input)
        elif qk_input is v_input:
            q, k, v = self.qkv(v_input).split(self.inner, dim=-1)  # one GEMM, as timm
        else:
            w, b, inner = self.qkv.weight, self.qkv.bias, self.inner
            q, k = F.linear(qk_input, w[: 2 * inner], None if b is None else b[: 2 * inner]).split(inner, -1)
            v = F.linear(v_input, w[2 * inner :], None if b is None else b[2 * inner :])
        q, k, v = (t.reshape(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if not self.transformers:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def qk_input(self, x: torch.Tensor) -> torch.Tensor:
        """What Q and K see: the layer's input, or in the blend alpha * LN(x) + (1 - alpha) * P."""
        return x

    def content_attention(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T * scale), (B, H, T, T): the explicit path, used when maps are recorded."""
        return torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        mask = kwargs.get("attn_mask", kwargs.get("attention_mask", args[0] if args else None))
        if mask is not None:
            raise ConfigError(
                "a converted attention layer takes no attention mask (ViTs attend to every token)"
            )
        q, k, v = self.project(self.qk_input(x), x)
        out = self.attend(q, k, v)  # (B, H, T, d)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.inner)
        if self.transformers:
            out = self.out_drop(self.o_proj(out))
            return (out, None) if self.returns_tuple else out
        return self.proj_drop(self.proj(self.norm(out)))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.record:
            attn = self.content_attention(q, k)
            self.attention_map = attn.detach()
            return attn @ v
        dropout = self.attn_drop_p if self.training else 0.0
        return scaled_attention(q, k, v, self.scale, dropout)


class PortedGPSA(PortedAttention):
    """ConViT's GPSA on a user's layer (module docstring): `pos_proj`, `gating_param`, relative indices."""

    def __init__(self, parts: dict[str, Any], grid: tuple[int, int], conversion: Conversion):
        super().__init__(parts, grid, mode="gpsa")
        self.kernel_head_dim = None  # its content attention is torch's SDPA, mixed with the positional maps
        refuse_block(parts, "gpsa", conversion)
        heads = self.num_heads
        device = self.weights()["q"].device
        self.pos_proj = nn.Linear(3, heads, device=device)
        self.gating_param = nn.Parameter(torch.ones(heads, device=device))
        self.register_buffer("rel_indices", relative_indices(*grid).to(device), persistent=False)
        init_linear(self.pos_proj)
        if conversion.local_init:
            self.local_init(conversion.locality_strength)

    @torch.no_grad()
    def local_init(self, locality_strength: float) -> None:
        """ConViT's local init (`GPSA.local_init`): V = identity, pos_proj row p = alpha * [2dx, 2dy, -1]."""
        weights = self.weights()
        write_local_init(self.pos_proj, weights["v"], self.num_heads, locality_strength)  # every row: k*k = H

    def gates(self) -> torch.Tensor:
        return torch.sigmoid(self.gating_param)

    def positional_attention(self) -> torch.Tensor:
        return positional_maps(self.pos_proj, self.rel_indices)  # (H, N, N)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        patches = self.grid[0] * self.grid[1]
        prefix = q.shape[2] - patches
        if prefix < 0:
            raise ConfigError(
                f"GPSA was built for a {self.grid[0]}x{self.grid[1]} grid but got {q.shape[2]} tokens"
            )
        gate, positional = self.gates(), self.positional_attention()  # (H,), (H, N, N)
        if self.record:
            content = self.content_attention(q, k)  # (B, H, T, T)
            g = gate.view(1, -1, 1, 1)
            at_offsets = F.pad(positional, (prefix, 0)).unsqueeze(0)  # (1, H, N, T): no weight on prefix keys
            rows = (1.0 - g) * content[:, :, prefix:] + g * at_offsets
            attn = torch.cat((content[:, :, :prefix], rows / rows.sum(dim=-1, keepdim=True)), dim=2)
            self.attention_map = attn.detach()
            return attn @ v
        dropout = self.attn_drop_p if self.training else 0.0
        content_out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=self.scale)
        if prefix == 0:  # exactly convinit's GPSA
            return gated_output(content_out, v, positional, gate).transpose(1, 2)
        patch_rows = gated_output(content_out[:, :, prefix:], v[:, :, prefix:], positional, gate)
        return torch.cat((content_out[:, :, :prefix], patch_rows.transpose(1, 2)), dim=2)  # (B, H, T, d)


class PortedBlend(PortedAttention):
    """Paper 1's Q/K blend on a user's layer (module docstring): P is a fixed buffer, not in the weights."""

    def __init__(self, parts: dict[str, Any], grid: tuple[int, int], conversion: Conversion):
        super().__init__(parts, grid, mode="blend")
        device = self.weights()["q"].device
        self.alpha = float(conversion.alpha)
        position = posemb_sincos_2d(*grid, self.dim).to(device)  # (N, D)
        self.register_buffer("position", position, persistent=False)
        eye = torch.eye(self.dim, device=device)
        self.register_buffer("content_projector", eye if conversion.content_projection else None)

    def qk_input(self, x: torch.Tensor) -> torch.Tensor:
        """alpha * LN(x) + (1 - alpha) * P over the patch rows; alpha * LN(x) on prefix rows (no position)."""
        prefix = x.shape[1] - self.position.shape[0]
        if prefix < 0:
            raise ConfigError(
                f"the blend was built for a {self.grid[0]}x{self.grid[1]} grid but got {x.shape[1]} tokens"
            )
        seen = x if self.content_projector is None else x @ self.content_projector  # (B, T, D)
        position = F.pad(self.position, (0, 0, prefix, 0)).to(x.dtype)  # (T, D): zero rows for prefix tokens
        return self.alpha * seen + (1.0 - self.alpha) * position

    @torch.no_grad()
    def start_training(self) -> None:
        """As SimpleViT's: fix the content projector from the Q/K weights as the init left them."""
        if self.content_projector is not None:
            from_weights = torch.cat((self.weights()["q"], self.weights()["k"]))
            self.content_projector.copy_(fitted_direction_projector(from_weights))


def refuse_block(part: dict[str, Any], mode: str, conversion: Conversion) -> None:
    """Every refusal one block's conversion to `mode` ("gpsa", "blend") can meet, from its parts alone:
    `convert` asks it of every block before it changes any (a model is never left half converted)."""
    heads, inner = part["heads"], part["heads"] * part["dim_head"]
    if mode == "blend" and inner % 4:
        raise ConfigError("the blend's sin-cos position embedding needs a width divisible by 4")
    if mode != "gpsa" or not conversion.local_init:
        return
    if math.isqrt(heads) ** 2 != heads:
        raise ConfigError(
            f"ConViT's local init needs a square number of heads (1, 4, 9, 16, ...), this model has "
            f"{heads}; convert with convert_args.local_init=false, or build the ViT with square heads"
        )
    width = part["qkv"].in_features if part["layout"] == "timm" else part["v"].in_features
    if inner != width:
        raise ConfigError("ConViT's local init sets V to the identity, which needs heads * head_dim = width")


def block_mode(kind: str, first_blocks: bool) -> str:
    """What one block becomes: in the first `layers` blocks GPSA (gpsa, gpsa+blend) or the blend (blend);
    after them the blend (gpsa+blend) or the layer as it was ("attention")."""
    if first_blocks:
        return "blend" if kind == "blend" else "gpsa"
    return "blend" if kind == "gpsa+blend" else "attention"


def host_layers(model: nn.Module) -> tuple[str, list[tuple[nn.Module, str]], tuple[int, int], int]:
    """(layout, [(block, attribute holding its attention)], patch grid, depth) of a timm or transformers
    ViT; ConfigError naming why a model cannot be converted, before anything is changed."""
    name = type(model).__name__
    if getattr(model, "conversion", None) is not None:
        raise ConfigError(f"this {name} is converted already ({model.conversion['kind']}); convert it once")
    if is_timm_layout(model):
        if getattr(model, "rope", None) is not None:
            raise ConfigError(f"{name} rotates q and k by position (RoPE): convert supports {SUPPORTED}")
        if getattr(model, "dynamic_img_size", False):
            raise ConfigError(
                f"{name} was built with dynamic_img_size: the conversions need a fixed patch grid"
            )
        return "timm", [(block, "attn") for block in model.blocks], timm_grid(model), len(model.blocks)
    backbone = hf_vit_backbone(model)
    if backbone is not None:
        layers = hf_layers(backbone)  # each layer's whole `attention` is replaced (4: with its output.dense)
        return "transformers", [(layer, "attention") for layer in layers], hf_grid(backbone), len(layers)
    raise ConfigError(f"convert supports {SUPPORTED}, not {name}")


def parts_of(layout: str, host: nn.Module, attribute: str) -> dict[str, Any]:
    """The pieces of one attention layer `PortedAttention` takes over (by reference, weights unchanged)."""
    attn = getattr(host, attribute)
    if layout == "timm":
        if getattr(attn, "gate", None) is not None or not hasattr(attn, "qkv"):
            raise ConfigError(
                f"convert supports timm's Attention, not {type(attn).__name__} (gated or unfused)"
            )
        heads = int(attn.num_heads)
        return {
            "layout": "timm", "heads": heads, "dim_head": attn.qkv.out_features // 3 // heads,
            "scale": attn.scale, "dropout": getattr(attn.attn_drop, "p", 0.0), "qkv": attn.qkv,
            "out": attn.proj, "q_norm": attn.q_norm, "k_norm": attn.k_norm,
            "norm": getattr(attn, "norm", nn.Identity()), "proj_drop": attn.proj_drop,
        }  # fmt: skip
    found = hf_projections(host)  # the layer's q/k/v/out Linears in either layout (the init's reading too)
    linears = {key: found[key] for key in ("q", "k", "v", "out")}
    if found["module"] is attn:  # transformers 5: ViTAttention holds q/k/v/o_proj, returns (out, weights)
        heads, dim_head = int(attn.config.num_attention_heads), int(attn.head_dim)
        return {"layout": "transformers", "heads": heads, "dim_head": dim_head, "scale": float(attn.scaling),
                "dropout": float(attn.attention_dropout), **linears}  # fmt: skip
    # transformers 4: ViTAttention.attention (query/key/value) and .output (dense, then dropout)
    inner = found["module"]
    heads, dim_head = int(inner.num_attention_heads), int(inner.attention_head_size)
    # late 4.x keeps the probability (dropout_prob); early 4.x an nn.Dropout module (dropout)
    dropout = float(inner.dropout_prob if hasattr(inner, "dropout_prob") else inner.dropout.p)
    returns = returns_tuple(attn, inner.query.in_features)
    return {"layout": "transformers", "heads": heads, "dim_head": dim_head, "scale": dim_head**-0.5,
            "dropout": dropout, **linears, "out_drop": attn.output.dropout,
            "returns_tuple": returns}  # fmt: skip


def returns_tuple(attn: nn.Module, dim: int) -> bool:
    """Whether a transformers-4 ViTAttention returns a tuple (early 4.x) or its output alone (late 4.x):
    its layer unpacks what it returns, so the ported layer must return the same. Asked of the layer itself,
    on one zero token (the version number would tie this to release notes)."""
    weight = attn.output.dense.weight
    with torch.no_grad():
        return isinstance(attn(weight.new_zeros(1, 1, dim)), tuple)


def convert(model: nn.Module, kind: str, **options: Any) -> nn.Module:
    """`model` (a timm or transformers ViT) with the first blocks' attention converted in place to ConViT's
    GPSA (`kind="gpsa"`) or paper 1's Q/K blend (`kind="blend"`), every other attention layer ported as it
    is (module docstring); returns the model. Options: `layers` (how many blocks, from the first; gpsa:
    ConViT's share of the depth by default, blend: all), gpsa `locality_strength` (1.0) and `local_init`
    (True), blend `alpha` (0.5 = Model I, 0 = Model II) and `content_projection` (False).

    Refused in one line, the model unchanged, when it cannot apply: another architecture, RoPE, a patch
    grid that is not fixed, more layers than blocks, a non-square head count for ConViT's local init.
    """
    conversion = conversion_of(kind, options)
    layout, hosts, grid, depth = host_layers(model)
    count = conversion.layers
    if count is None:
        count = max(1, round(depth * CONVIT_GPSA_SHARE)) if kind != "blend" else depth
    if count > depth:
        raise ConfigError(f"convert {kind} layers={count} but the model has {depth} blocks; lower layers")
    parts = [parts_of(layout, host, attribute) for host, attribute in hosts]
    modes = [block_mode(kind, index < count) for index in range(depth)]
    for part, mode in zip(parts, modes, strict=True):  # every refusal, in every block, before a change
        refuse_block(part, mode, conversion)
    ported = [ported_layer(mode, part, grid, conversion) for part, mode in zip(parts, modes, strict=True)]
    for (host, attribute), module in zip(hosts, ported, strict=True):
        setattr(host, attribute, module)
    model.conversion = {**conversion.to_dict(), "layers": count}  # what export writes to config.json
    return model


def ported_layer(
    mode: str, part: dict[str, Any], grid: tuple[int, int], conversion: Conversion
) -> PortedAttention:
    """One block's attention as `block_mode` chose it."""
    if mode == "gpsa":
        return PortedGPSA(part, grid, conversion)
    if mode == "blend":
        return PortedBlend(part, grid, conversion)
    return PortedAttention(part, grid)


def converted_layers(model: nn.Module) -> list[PortedAttention]:
    """The model's ported attention layers in forward order ([] for a model that was not converted)."""
    return [m for m in model.modules() if isinstance(m, PortedAttention)]
