"""Trockman & Kolter's mimetic init on timm's fused qkv and transformers' separate q/k/v, checked against
its definition (docs/method.md §4), and the class-token behaviour that makes it stall on ViT-Ti.
"""

from __future__ import annotations

import pytest
import torch

from convinit.init import initialize
from convinit.init.schemes.mimetic import uniform_unit_variance
from convinit.models.hf_layout import hf_layers, hf_projections, hf_vit_backbone
from tests.init.test_own_models import hf_vit, model_maps, timm_vit

timm = pytest.importorskip("timm")

D, HEADS, d = 64, 4, 16


def timm_weights(model) -> list[dict[str, torch.Tensor]]:
    """Per layer q, k, v (H*d, D), out (D, H*d) and the biases, from timm's fused qkv."""
    layers = []
    for block in model.blocks:
        weight, bias = block.attn.qkv.weight.detach(), block.attn.qkv.bias.detach()
        q, k, v = weight.split(D)
        layers.append({"q": q, "k": k, "v": v, "out": block.attn.proj.weight.detach(),
                       "qk_bias": bias[: 2 * D], "v_bias": bias[2 * D :].clone(),
                       "out_bias": block.attn.proj.bias.detach().clone()})  # fmt: skip
    return layers


def hf_weights(model) -> list[dict[str, torch.Tensor]]:
    """The same from transformers' separate query/key/value and output dense layers."""
    layers = []
    for layer in hf_layers(hf_vit_backbone(model)):
        parts = hf_projections(layer)
        q, k, v, out = parts["q"], parts["k"], parts["v"], parts["out"]
        layers.append({"q": q.weight.detach(), "k": k.weight.detach(), "v": v.weight.detach(),
                       "out": out.weight.detach(), "qk_bias": torch.cat([q.bias, k.bias]).detach(),
                       "v_bias": v.bias.detach().clone(), "out_bias": out.bias.detach().clone()})  # fmt: skip
    return layers


def definition(seed: int, layers: int) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
    """Per layer: the rank-d best approximation of a1 Z + b1 I for each head, and a2 Z - b2 I (rank H*d = D,
    exact), with the Z drawn in the order the scheme draws them (each head's, then V/proj's)."""
    generator = torch.Generator().manual_seed(seed)
    eye = torch.eye(D, dtype=torch.float64)
    out = []
    for _ in range(layers):
        heads = []
        for _ in range(HEADS):
            u, s, vh = torch.linalg.svd(0.7 * uniform_unit_variance(D, generator) + 0.7 * eye)
            heads.append((u[:, :d] * s[:d]) @ vh[:d])
        out.append((heads, 0.4 * uniform_unit_variance(D, generator) - 0.4 * eye))
    return out


@pytest.mark.parametrize("family", ["timm", "transformers"])
def test_mimetic_products_are_the_papers_definition_on_timm_and_transformers_vits(family):
    torch.manual_seed(0)
    model = timm_vit(28) if family == "timm" else hf_vit(28)
    read = timm_weights if family == "timm" else hf_weights
    before = read(model)
    position = (model.pos_embed if family == "timm" else model.vit.embeddings.position_embeddings).clone()
    initialize(model, "mimetic", seed=3)
    after = read(model)
    for layer, (heads, value_proj), old in zip(after, definition(3, len(after)), before, strict=True):
        for h, product in enumerate(heads):  # per head: x Wq_h (x Wk_h)^T = x (a1 Z + b1 I)_d x^T
            rows = slice(h * d, (h + 1) * d)
            got = layer["q"][rows].T.double() @ layer["k"][rows].double()
            torch.testing.assert_close(got, product, atol=1e-5, rtol=0)
        # over all heads: x -> x Wv Wproj, the value path of a layer whose attention is the identity
        got = layer["v"].T.double() @ layer["out"].T.double()
        torch.testing.assert_close(got, value_proj, atol=1e-5, rtol=0)
        assert float(layer["qk_bias"].abs().max()) == 0  # q/k biases zeroed: the logits are the product's
        assert torch.equal(layer["v_bias"], old["v_bias"]) and torch.equal(layer["out_bias"], old["out_bias"])
    now = model.pos_embed if family == "timm" else model.vit.embeddings.position_embeddings
    assert torch.equal(now, position)  # the position table is left as the model drew it


def test_mimetic_class_token_attends_only_itself_at_vit_ti_head_width():
    """ViT-Ti's width and heads (D 192, d = 64): the class token's self-logit is 6-9 above its logits to
    the patches, so it keeps ~all its attention on itself in every layer and reads no image at init; at
    D 64, d = 16 the peak is lower. Random init spreads it (about 1 / tokens)."""
    from timm.models.vision_transformer import VisionTransformer

    images = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    masses = {}
    for name, dim, heads in (("d64", 192, 3), ("d16", 64, 4)):
        for scheme in ("mimetic", "random"):
            torch.manual_seed(0)
            model = VisionTransformer(img_size=28, patch_size=7, in_chans=1, embed_dim=dim, depth=2,
                                      num_heads=heads, num_classes=10)  # fmt: skip
            if scheme == "mimetic":
                initialize(model, "mimetic", seed=0)
            maps = model_maps(model, images)  # [(B, H, 17, 17)]
            masses[name, scheme] = min(float(m[:, :, 0, 0].mean()) for m in maps)
    assert masses["d64", "mimetic"] > 0.9
    assert masses["d16", "mimetic"] < 0.75
    assert masses["d64", "random"] < 0.2 and masses["d16", "random"] < 0.2
