"""The fused attention for many small heads (convinit.models.small_heads) against its definition,
softmax(q k^T * scale) v, forward and backward; off unless switched on, and then only where it applies."""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F

import convinit
from convinit.models.layers import scaled_attention
from convinit.models.small_heads import applies, kernel, small_head_attention, small_head_attention_enabled


@pytest.fixture(scope="module")
def built():
    if kernel() is None:
        pytest.skip("no C++ toolchain here: the kernel is not built and attention stays torch's")


def qkv_views(batch: int, tokens: int, heads: int, dim_head: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k, v as a ViT's fused qkv projection gives them: (B, H, N, d) views of one (B, N, 3, H, d)."""
    torch.manual_seed(seed)
    qkv = torch.randn(batch, tokens, 3, heads, dim_head).permute(2, 0, 3, 1, 4)  # (3, B, H, N, d)
    return tuple(t.requires_grad_() for t in qkv.clone().unbind(0))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v


@pytest.mark.parametrize("heads", [8, 16])
def test_kernel_equals_the_explicit_softmax_attention_forward_and_backward(built, heads):
    q, k, v = qkv_views(3, 50, heads, 64 // heads)
    scale = (64 // heads) ** -0.5
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    grad = torch.randn(q.shape)
    out = small_head_attention(q, k, v, scale)
    expected = reference(*exact, scale)
    assert torch.allclose(out.double(), expected, atol=2e-6)
    out.backward(grad)
    expected.backward(grad.double())
    for mine, theirs in zip((q, k, v), exact, strict=True):
        assert torch.allclose(mine.grad.double(), theirs.grad, atol=2e-5)


def test_peaked_maps_are_as_exact_as_float32_attention_where_most_weights_underflow(built):
    q, k, v = qkv_views(2, 49, 16, 4, seed=1)
    with torch.no_grad():
        q.mul_(30.0)  # logits of hundreds: impulse init's near-one-hot rows
    exact = reference(q.double(), k.double(), v.double(), 0.5)
    float32_error = (reference(q, k, v, 0.5).double() - exact).abs().max()  # logits of hundreds round
    assert (small_head_attention(q, k, v, 0.5).double() - exact).abs().max() <= float32_error + 1e-6


def test_a_converted_timm_vit_trains_the_same_with_the_kernel(built):
    def loss_and_grads(on: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        torch.manual_seed(0)
        shape = dict(
            img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=64, depth=2, num_heads=16
        )
        model = timm.create_model("vit_tiny_patch16_224", **shape)
        convinit.convert(model, "blend", content_projection=True)
        images, labels = torch.randn(4, 1, 28, 28), torch.arange(4)
        with small_head_attention_enabled(on):
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    (plain, plain_grads), (fused, fused_grads) = loss_and_grads(False), loss_and_grads(True)
    assert torch.allclose(plain, fused, atol=1e-6)
    for a, b in zip(plain_grads, fused_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_the_default_attention_is_torchs_sdpa_and_the_kernel_applies_only_where_switched_on():
    q, k, v = (t.detach() for t in qkv_views(2, 50, 16, 4))
    assert torch.equal(scaled_attention(q, k, v, 0.5), F.scaled_dot_product_attention(q, k, v, scale=0.5))
    assert not applies(q)
    with small_head_attention_enabled():
        wide = torch.randn(2, 4, 50, 16)
        assert not applies(wide) and not applies(q.double()) and not applies(q, dropout=0.1)
    assert not applies(q)
