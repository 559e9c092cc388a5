"""Where attention lives in a model: each attention layer as an `AttentionSlot` the init schemes write into.

Supported (`SUPPORTED`): convinit SimpleViTs (`simplevit`, `vit_tiny_patch2_32`, any qk_input),
timm-layout ViTs (timm `VisionTransformer` and `VisionTransformerDistilled`, Eva without RoPE, convinit
`deit`: fused `blocks[i].attn.qkv`, `pos_embed` or none, prefix tokens first, optional qk_norm) and
transformers `ViTModel` / `ViTForImageClassification` (`convinit.models.hf_layout`). A slot also knows
its block (run one at a time by `convinit.init.block_runner`) and how to read the Q/K input its layer
really sees (`AttentionSlot.qk_input_of`), so that schemes can fit and measure maps on real images
(`convinit.init.measure`). `PositionTable` is a timm or transformers model's position embedding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.registry import SCHEMES
from convinit.models.convert import PortedAttention, converted_layers
from convinit.models.filters import Grid
from convinit.models.hf_layout import hf_grid, hf_heads, hf_layers, hf_projections, hf_vit_backbone
from convinit.models.layers import posemb_sincos_2d
from convinit.models.timm_layout import is_timm_layout, timm_grid
from convinit.models.vit import FreeAttention, SimpleViT

SUPPORTED = (
    "convinit SimpleViT models (simplevit, vit_tiny_patch2_32; qk_input x, blend or free), timm-layout ViTs "
    "(timm VisionTransformer and VisionTransformerDistilled: vit_*, deit_*, deit3_*; timm Eva without RoPE; "
    "convinit deit) and transformers ViTModel / ViTForImageClassification"
)


@dataclass
class AttentionSlot:
    """One attention layer: where its Q/K/V/out weights live and which position-only input it sees.

    `q_weight`, `k_weight`, `v_weight` are (H*d, D) views into the layer's parameters and `out_weight`
    its (D, H*d) output projection; writing into them (under no_grad) initialises the layer. Model III
    layers have `free` set instead of q/k weights. `inputs` holds the candidate pseudo-inputs X (N, D),
    on the CPU where the solvers run, and `seen` names the one the layer really sees when alpha = 0
    (or the closest proxy).
    """

    layer: int
    heads: int
    dim_head: int
    scale: float
    grid: Grid
    v_weight: torch.Tensor
    out_weight: torch.Tensor
    q_weight: torch.Tensor | None = None
    k_weight: torch.Tensor | None = None
    qk_biases: list[torch.Tensor] = field(default_factory=list)
    free: FreeAttention | None = None
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    seen: str | None = None
    seen_note: str = ""
    default_rms: float = 1.0  # rms of the model's default Q/K init, the unit of the reported weight scale
    module: nn.Module | None = None  # the attention module, hooked to read its real Q/K input
    real_input: str = ""  # what the Q/K projection sees on real images, in words
    content: float = 1.0  # share of image content in the Q/K input (blend: alpha), for fits without images
    position_share: float = 1.0  # share of position in it (blend: 1 - alpha)
    block: nn.Module | None = None  # the block holding the layer, run one at a time by `BlockRunner`
    qk_norms: list[nn.Module] = field(default_factory=list)  # timm's qk_norm: LayerNorms on q and k
    separate_qk_input: bool = False  # the attention takes its Q/K input apart (SimpleViT's `qk_input`)
    forms_qk_input: bool = False  # the attention forms its Q/K input from its input (a converted blend)

    def qk_input_of(self, args: tuple, kwargs: dict) -> torch.Tensor:
        """The Q/K input of a call of `module`: `qk_input` when given (blend models), what a converted
        blend forms from its input, else its input."""
        qk = None
        if self.separate_qk_input:
            qk = kwargs.get("qk_input", args[1] if len(args) > 1 else None)
        if qk is not None:
            return qk
        x = args[0] if args else next(iter(kwargs.values()))
        return self.module.qk_input(x) if self.forms_qk_input else x


@dataclass
class PositionTable:
    """A timm or transformers ViT's position embedding: `weight` (1, prefix rows + N, D), patch rows last."""

    weight: torch.Tensor
    grid: Grid

    @property
    def patch_rows(self) -> torch.Tensor:
        """(N, D), detached."""
        return self.weight.detach()[0, -self.grid[0] * self.grid[1] :]

    @property
    def learned(self) -> bool:
        return bool(self.weight.requires_grad)


def position_table(model: nn.Module) -> PositionTable | None:
    """The position embedding of a timm-layout or transformers ViT, or None (none, or another model)."""
    if is_timm_layout(model):
        weight, grid = model.pos_embed, timm_grid(model)
    elif (backbone := hf_vit_backbone(model)) is not None:
        weight, grid = backbone.embeddings.position_embeddings, hf_grid(backbone)
    else:
        return None
    if not isinstance(weight, torch.Tensor):
        return None
    if weight.shape[1] < grid[0] * grid[1]:
        raise ConfigError(
            f"the position embedding has {weight.shape[1]} rows but the grid has {grid} patches"
        )
    return PositionTable(weight, grid)


def sincos_into_pos_embed(model: nn.Module) -> None:
    """Write the fixed 2-D sin-cos P into the patch rows of a timm or transformers ViT's position
    embedding (prefix rows kept)."""
    table = position_table(model)
    if table is None:
        raise ConfigError("sin-cos position embedding applies to timm and transformers ViTs with a pos_embed")
    patches = table.grid[0] * table.grid[1]
    with torch.no_grad():
        table.weight[0, -patches:] = posemb_sincos_2d(*table.grid, table.weight.shape[-1]).to(table.weight)


def simplevit_slots(model: SimpleViT) -> list[AttentionSlot]:
    pos = model.pos_embedding  # (N, D)
    slots = []
    for index, (block, attn) in enumerate(zip(model.blocks, model.attention_layers(), strict=True)):
        inner = attn.heads * attn.dim_head
        slot = AttentionSlot(
            layer=index,
            heads=attn.heads,
            dim_head=attn.dim_head,
            scale=attn.scale,
            grid=model.grid,
            v_weight=attn.to_v.weight,
            out_weight=attn.to_out.weight,
            default_rms=(3 * attn.to_v.in_features) ** -0.5,  # nn.Linear's U(+-1/sqrt(D))
            module=attn,
            block=block,
            separate_qk_input=True,
        )
        if isinstance(attn, FreeAttention):
            slot.free = attn
            slot.default_rms = 3**-0.5  # FreeAttention's normal init
            slot.real_input = "none: free maps, the same for every image"
        else:
            slot.q_weight, slot.k_weight = attn.to_qk.weight[:inner], attn.to_qk.weight[inner:]
            with torch.no_grad():
                slot.inputs = {"P": pos.float().cpu(), "LN(P)": block.norm(pos).float().cpu()}
            if model.qk_input == "blend":
                slot.seen, slot.seen_note = "P", f"P: exact at alpha = 0 (this model: alpha = {model.alpha})"
                slot.real_input = f"{model.alpha:g} * LN(x) + {1 - model.alpha:g} * P"
                slot.content, slot.position_share = model.alpha, 1.0 - model.alpha
            elif model.pos_embed == "input":
                slot.seen, slot.seen_note = "LN(P)", "LN(P): a proxy, the layer sees LN(patches + P)"
                slot.real_input = "LN(x + P)"
        slots.append(slot)
    return slots


def projection_slot(index: int, norm: nn.Module, table: PositionTable | None, **fields) -> AttentionSlot:
    """A pre-norm layer with Q/K projections (timm, transformers): its Q/K input is norm(x + pos), so the
    proxy pseudo-input is LN(P) = norm(patch rows of the position embedding)."""
    slot = AttentionSlot(layer=index, default_rms=0.02, **fields)  # timm's and transformers' 0.02 init
    if table is not None:
        pos = table.patch_rows
        with torch.no_grad():
            slot.inputs = {"P": pos.float().cpu(), "LN(P)": norm(pos).float().cpu()}
        slot.seen = "LN(P)"
        slot.seen_note = "LN(P) = norm1(patch rows of pos_embed): a proxy, the layer sees norm1(x + pos)"
    return slot


def ported_slot(
    index: int,
    attn: PortedAttention,
    block: nn.Module,
    norm: nn.Module,
    table: PositionTable | None,
    name: str,
) -> list[AttentionSlot]:
    """A converted model's layer (`convinit.models.convert`) as a slot: a ported attention layer as the
    layer it was, a blend with its fixed P as the pseudo-input the layer sees (exact at alpha = 0), none
    for a GPSA layer (ConViT's own local init made its positional part; init schemes act on the rest)."""
    if attn.mode == "gpsa":
        return []
    weights = attn.weights()
    slot = projection_slot(
        index,
        norm,
        table,
        heads=attn.num_heads,
        dim_head=attn.head_dim,
        scale=attn.scale,
        grid=attn.grid,
        q_weight=weights["q"],
        k_weight=weights["k"],
        v_weight=weights["v"],
        out_weight=weights["out"],
        qk_biases=[b for b in (weights["q_bias"], weights["k_bias"]) if b is not None],
        module=attn,
        block=block,
        real_input=f"{name}(x + pos)" if table is not None else f"{name}(x)",
    )
    slot.qk_norms = [n for n in (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None))
                     if n is not None and not isinstance(n, nn.Identity)]  # fmt: skip
    if attn.mode == "blend":
        with torch.no_grad():
            slot.inputs = {"P": attn.position.float().cpu(), "LN(P)": norm(attn.position).float().cpu()}
        slot.seen, slot.seen_note = "P", f"P: exact at alpha = 0 (this model: alpha = {attn.alpha})"
        slot.real_input = f"{attn.alpha:g} * {name}(x) + {1 - attn.alpha:g} * P"
        slot.content, slot.position_share = attn.alpha, 1.0 - attn.alpha
        slot.forms_qk_input = True
    return [slot]


def timm_slots(model: nn.Module) -> list[AttentionSlot]:
    grid = timm_grid(model)
    table = position_table(model)
    slots = []
    for index, block in enumerate(model.blocks):
        attn = block.attn
        if isinstance(attn, PortedAttention):
            slots.extend(ported_slot(index, attn, block, block.norm1, table, "norm1"))
            continue
        heads = int(attn.num_heads)
        inner = attn.qkv.out_features // 3
        bias = attn.qkv.bias
        # timm's Eva keeps its q/k biases apart from the fused qkv (q_bias, k_bias), zero at init
        separate = [
            b for b in (getattr(attn, "q_bias", None), getattr(attn, "k_bias", None)) if b is not None
        ]
        slot = projection_slot(
            index,
            block.norm1,
            table,
            heads=heads,
            dim_head=inner // heads,
            scale=float(getattr(attn, "scale", (inner // heads) ** -0.5)),
            grid=grid,
            q_weight=attn.qkv.weight[:inner],
            k_weight=attn.qkv.weight[inner : 2 * inner],
            v_weight=attn.qkv.weight[2 * inner :],
            out_weight=attn.proj.weight,
            qk_biases=([] if bias is None else [bias[: 2 * inner]]) + separate,
            module=attn,
            block=block,
            real_input="norm1(x + pos_embed)" if table is not None else "norm1(x)",
        )
        slot.qk_norms = [n for n in (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None))
                         if n is not None and not isinstance(n, nn.Identity)]  # fmt: skip
        slots.append(slot)
    return slots


def hf_slots(backbone: nn.Module) -> list[AttentionSlot]:
    grid = hf_grid(backbone)
    table = position_table(backbone)
    heads, dim_head = hf_heads(backbone)
    slots = []
    for index, layer in enumerate(hf_layers(backbone)):
        ported = [m for m in layer.modules() if isinstance(m, PortedAttention)]
        if ported:
            slots.extend(
                ported_slot(index, ported[0], layer, layer.layernorm_before, table, "layernorm_before")
            )
            continue
        parts = hf_projections(layer)
        module = parts["module"]
        slots.append(
            projection_slot(
                index,
                layer.layernorm_before,
                table,
                heads=heads,
                dim_head=dim_head,
                scale=float(getattr(module, "scaling", dim_head**-0.5)),
                grid=grid,
                q_weight=parts["q"].weight,
                k_weight=parts["k"].weight,
                v_weight=parts["v"].weight,
                out_weight=parts["out"].weight,
                qk_biases=[p.bias for p in (parts["q"], parts["k"]) if p.bias is not None],
                module=module,
                block=layer,
                real_input="layernorm_before(x + position_embeddings)",
            )
        )
    return slots


def attention_slots(model: nn.Module, scheme: str) -> list[AttentionSlot]:
    """The model's attention layers as `AttentionSlot`s, or a ConfigError naming the supported models.

    A converted model's GPSA layers are no slots (`ported_slot`): on a ViT converted to GPSA in every
    block the list is empty (`no_attention_left`), and each scheme says what it does then (its
    `register_scheme(..., needs_attention=...)`)."""
    if isinstance(model, SimpleViT):
        return simplevit_slots(model)
    if (backbone := hf_vit_backbone(model)) is not None:
        return hf_slots(backbone)
    if is_timm_layout(model):
        if scheme in ("impulse", "measure") and getattr(model, "rope", None) is not None:
            # e.g. timm's EVA-02: q and k are rotated by position inside attention, so the logits are
            # not (X W_q)(X W_k)^T and a fit of W_q, W_k would not give the maps it reports
            raise ConfigError(
                f"impulse init does not support {type(model).__name__} with rotary position embeddings "
                f"(RoPE rotates q and k inside attention, outside the fit); it supports {SUPPORTED} "
                f"(mimetic init works on this model)"
            )
        return timm_slots(model)
    raise ConfigError(f"{scheme} init does not support {type(model).__name__}; it supports {SUPPORTED}")


def no_attention_left(model: nn.Module) -> str | None:
    """Why `model` has no attention layer an init scheme can write into or measure, in words, or None when
    it has one. So far one reason: a ViT converted to GPSA in every block (ConViT's ablation; `convert`
    with layers equal to the depth, or its default on a depth-2 ViT), whose layers keep ConViT's local init
    (`ported_slot`). Reads the layers' modes only, so it answers on a model built on the meta device too
    (validation, before any work)."""
    layers = converted_layers(model)
    if not layers or any(layer.mode != "gpsa" for layer in layers):
        return None
    blocks = f"{len(layers)} of {len(layers)} block{'s' if len(layers) > 1 else ''}"
    return (
        f"every attention layer of this model was converted to GPSA (convert=gpsa, {blocks}; ConViT's local "
        f"init set them), so no plain attention layer is left"
    )


def check_scheme_applies(model: nn.Module, scheme: str) -> None:
    """A one-line ConfigError when `scheme` acts on attention layers only (`register_scheme`'s
    `needs_attention`) and `model` has none left (`no_attention_left`): it would be `random` under another
    name. Reads no weight, so validation runs it on the model built on the meta device, before the run
    folder exists; `initialize` runs it first, and so do those schemes themselves (a direct call)."""
    reason = no_attention_left(model) if SCHEMES.get(scheme).needs_attention else None
    if reason is not None:
        raise ConfigError(
            f"{scheme} init acts on attention layers, but {reason} for it to act on (it would be init=random "
            f"under another name); convert fewer blocks (convert_args.layers below the depth) or use "
            f"init=random (init=scaled-position scales the position table alone)"
        )


def write_qk(slot: AttentionSlot, wq: torch.Tensor, wk: torch.Tensor) -> None:
    """Copy per-head Wq, Wk (H, D, d) into the layer (rows h*d:(h+1)*d of the q and k projections)."""
    d = slot.dim_head
    with torch.no_grad():
        for head in range(slot.heads):
            slot.q_weight[head * d : (head + 1) * d] = wq[head].T.to(slot.q_weight)
            slot.k_weight[head * d : (head + 1) * d] = wk[head].T.to(slot.k_weight)
        for bias in slot.qk_biases:
            bias.zero_()


def rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt())


def qk_parameters(slot: AttentionSlot) -> list[torch.Tensor]:
    if slot.free is not None:
        return [slot.free.q_factors, slot.free.k_factors]
    return [slot.q_weight, slot.k_weight]
