"""Hugging Face transformers ViTs as `AttentionSlot`s: `ViTModel`, `ViTForImageClassification` (and the
other heads built on `ViTModel`, e.g. `ViTForMaskedImageModeling`).

Both layouts of transformers' ViT are read: `vit.layers[i].attention.{q,k,v,o}_proj` (transformers
5) and `vit.encoder.layer[i].attention.attention.{query,key,value}` with `attention.output.dense`
(transformers 4). Each layer is pre-norm: the Q/K input is `layernorm_before(x)`, x = class token then
patches plus `embeddings.position_embeddings` (learned, truncated-normal 0.02 by default, a row for
the class token first). The model is not imported here: it is recognised by its attributes, so
transformers stays an optional dependency.
"""

from __future__ import annotations

import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.filters import Grid


def hf_vit_backbone(model: nn.Module) -> nn.Module | None:
    """The `ViTModel` inside `model` (itself, or `model.vit`), or None when it is not a transformers ViT."""
    for candidate in (model, getattr(model, "vit", None)):
        embeddings = getattr(candidate, "embeddings", None)
        if candidate is None or not hasattr(embeddings, "patch_embeddings"):
            continue
        if hf_layers(candidate) is not None and hasattr(embeddings, "position_embeddings"):
            return candidate
    return None


def hf_layers(backbone: nn.Module) -> nn.ModuleList | None:
    layers = getattr(backbone, "layers", None)
    if layers is None:
        layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    return layers if isinstance(layers, nn.ModuleList) and len(layers) else None


def hf_grid(backbone: nn.Module) -> Grid:
    config = backbone.config
    size, patch = config.image_size, config.patch_size
    size = (size, size) if isinstance(size, int) else tuple(size)
    patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
    return size[0] // patch[0], size[1] // patch[1]


def hf_projections(layer: nn.Module) -> dict[str, nn.Module]:
    """The attention module the Q/K input enters and its q/k/v/out Linear layers, either layout."""
    attn = layer.attention
    if isinstance(getattr(attn, "q_proj", None), nn.Linear):  # transformers 5
        return {"module": attn, "q": attn.q_proj, "k": attn.k_proj, "v": attn.v_proj, "out": attn.o_proj}
    inner = getattr(attn, "attention", None)
    if isinstance(getattr(inner, "query", None), nn.Linear):  # transformers 4
        return {"module": inner, "q": inner.query, "k": inner.key, "v": inner.value, "out": attn.output.dense}
    raise ConfigError(
        f"this transformers ViT layer ({type(attn).__name__}) has neither q_proj/k_proj nor "
        "attention.query/key: an unknown layout"
    )


def hf_heads(backbone: nn.Module) -> tuple[int, int]:
    """(heads, dim_head) of the model's attention layers."""
    config = backbone.config
    heads = int(config.num_attention_heads)
    dim_head = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return heads, dim_head
