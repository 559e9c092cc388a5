"""Attention for many small heads on a CPU: one fused kernel per (image, head), maps never stored.

At the users'-ViT shape (50 tokens, width 64) torch's CPU attention costs in proportion to the number of
heads, not to the FLOPs, which are the same for 4 heads of 16 and 16 heads of 4: every (image, head)
pair is its own small 50 x 50 product in the flash kernel or in `bmm` (the matrix packing and the
softmax touch all B * H * N^2 entries), so 16 heads took 3.5x the time of 4 (docs/speed.md, "Many
small heads"). This kernel computes softmax(q k^T * scale) v row by row with the row's N scores in a
buffer (scale folded into k, the softmax's max, exponentials and sum in the same pass, then the value
product), saves each row's log-sum-exp, and in the backward pass recomputes the row's weights from it
(as flash attention does) to form dq, dk and dv in one pass over the rows: no (B, H, N, N) tensor is
written, forward or backward. Exact against softmax(q k^T * scale) v within float rounding (its
exponential is a degree-6 polynomial, relative error under 2e-7; tests/models/test_small_heads.py).

It is C++ built on first use with torch's extension builder (about a minute, cached per machine) and
used only where it is switched on (`small_head_attention_enabled`) and applies (`applies`): float32 CPU
tensors of head dim at most SMALL_HEAD_DIM and no attention dropout, where it wins; elsewhere, or if the
build fails (no compiler), attention is torch's scaled_dot_product_attention, as it always was.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.autograd.function import once_differentiable

# measured (docs/speed.md): at head dim 16 torch's flash kernel is as fast or faster; at 8 and 4 this one
SMALL_HEAD_DIM = 8
_ENABLED = {"on": False}

KERNEL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// exp(x) for x <= 0 as plain arithmetic the compiler vectorises: 2^t, t = x log2(e) = n + f with
// n = round(t), |f| <= 1/2, 2^f by Cephes' exp2f polynomial, 2^n written into the exponent bits.
static inline float exp_nonpositive(float x) {
  x = x < -87.f ? -87.f : x;
  const float t = x * 1.44269504088896341f;
  const float n = std::floor(t + 0.5f);
  const float f = t - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const int32_t bits = ((int32_t)n + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, 4);
  return p * two_n;
}

static void check(const torch::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.dim() == 4 && t.stride(3) == 1,
              "small-head attention takes float32 CPU tensors (B, H, N, d) whose d is contiguous");
}

// row i of pair (b, h) of a (B, H, N, d) tensor, whatever its strides over B, H and N
struct Rows {
  float* base; int64_t heads, sb, sh, sn;
  explicit Rows(const torch::Tensor& t)
      : base(t.data_ptr<float>()), heads(t.size(1)), sb(t.stride(0)), sh(t.stride(1)), sn(t.stride(2)) {}
  float* row(int64_t bh, int64_t i) const { return base + (bh / heads) * sb + (bh % heads) * sh + i * sn; }
};

// (N, d) rows of one pair -> (d, N), so that every inner loop runs over the N keys, contiguous
static void transpose_into(const Rows& src, int64_t bh, int64_t n, int64_t d, float factor, float* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const float* r = src.row(bh, j);
    for (int64_t c = 0; c < d; ++c) dst[c * n + j] = r[c] * factor;
  }
}

// (B, H, N, d) in the memory order of (B, N, H, d): what the heads' merge and the qkv split read freely
static torch::Tensor like_tokens_major(const torch::Tensor& t) {
  return torch::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
}

std::vector<torch::Tensor> forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
  check(q); check(k); check(v);
  const int64_t pairs = q.size(0) * q.size(1), n = q.size(2), d = q.size(3);
  auto out = like_tokens_major(q);
  auto lse = torch::empty({pairs, n}, q.options());
  const Rows Q(q), K(k), V(v), O(out);
  float* L = lse.data_ptr<float>();
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kt(d * n), vt(d * n), s(n);
    for (int64_t bh = begin; bh < end; ++bh) {
      transpose_into(K, bh, n, d, (float)scale, kt.data());
      transpose_into(V, bh, n, d, 1.f, vt.data());
      for (int64_t i = 0; i < n; ++i) {
        const float* qi = Q.row(bh, i);
        std::fill(s.begin(), s.end(), 0.f);
        for (int64_t c = 0; c < d; ++c) {
          const float a = qi[c], *kr = kt.data() + c * n;
          for (int64_t j = 0; j < n; ++j) s[j] += a * kr[j];
        }
        float m = s[0];
        for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
        float z = 0.f;
        for (int64_t j = 0; j < n; ++j) { s[j] = exp_nonpositive(s[j] - m); z += s[j]; }
        float* oi = O.row(bh, i);
        for (int64_t c = 0; c < d; ++c) {
          const float* vr = vt.data() + c * n;
          float acc = 0.f;
          for (int64_t j = 0; j < n; ++j) acc += s[j] * vr[j];
          oi[c] = acc / z;
        }
        L[bh * n + i] = m + std::log(z);
      }
    }
  });
  return {out, lse};
}

std::vector<torch::Tensor> backward(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor out,
                                    torch::Tensor lse, torch::Tensor grad, double scale) {
  check(q); check(k); check(v); check(out); check(grad);
  const int64_t pairs = q.size(0) * q.size(1), n = q.size(2), d = q.size(3);
  auto dq = like_tokens_major(q), dk = like_tokens_major(k), dv = like_tokens_major(v);
  const Rows Q(q), K(k), V(v), O(out), G(grad), DQ(dq), DK(dk), DV(dv);
  const float* L = lse.data_ptr<float>();
  const float sc = (float)scale;
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kt(d * n), vt(d * n), dkt(d * n), dvt(d * n), p(n), ds(n);
    for (int64_t bh = begin; bh < end; ++bh) {
      transpose_into(K, bh, n, d, 1.f, kt.data());
      transpose_into(V, bh, n, d, 1.f, vt.data());
      std::fill(dkt.begin(), dkt.end(), 0.f);
      std::fill(dvt.begin(), dvt.end(), 0.f);
      for (int64_t i = 0; i < n; ++i) {
        const float *qi = Q.row(bh, i), *gi = G.row(bh, i), *oi = O.row(bh, i);
        float delta = 0.f;  // sum_j p_j dp_j = grad_i . out_i
        for (int64_t c = 0; c < d; ++c) delta += gi[c] * oi[c];
        std::fill(p.begin(), p.end(), 0.f);
        std::fill(ds.begin(), ds.end(), 0.f);
        for (int64_t c = 0; c < d; ++c) {
          const float a = qi[c] * sc, g = gi[c], *kr = kt.data() + c * n, *vr = vt.data() + c * n;
          for (int64_t j = 0; j < n; ++j) { p[j] += a * kr[j]; ds[j] += g * vr[j]; }
        }
        const float l = L[bh * n + i];
        for (int64_t j = 0; j < n; ++j) { p[j] = exp_nonpositive(p[j] - l); ds[j] = p[j] * (ds[j] - delta); }
        float* dqi = DQ.row(bh, i);
        for (int64_t c = 0; c < d; ++c) {
          const float a = qi[c] * sc, g = gi[c], *kr = kt.data() + c * n;
          float *dkr = dkt.data() + c * n, *dvr = dvt.data() + c * n, acc = 0.f;
          for (int64_t j = 0; j < n; ++j) { acc += ds[j] * kr[j]; dkr[j] += a * ds[j]; dvr[j] += g * p[j]; }
          dqi[c] = acc * sc;
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        float *dkj = DK.row(bh, j), *dvj = DV.row(bh, j);
        for (int64_t c = 0; c < d; ++c) { dkj[c] = dkt[c * n + j]; dvj[c] = dvt[c * n + j]; }
      }
    }
  });
  return {dq, dk, dv};
}
"""
# vectorised loops need reassociation; no -ffinite-math-only (the kernel keeps IEEE infinities)
BUILD_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math",
               "-fno-signed-zeros"]  # fmt: skip


@functools.lru_cache(maxsize=1)
def kernel() -> Any | None:
    """The built kernel module, or None (with one warning) where it cannot be built."""
    try:
        from torch.utils.cpp_extension import load_inline

        return load_inline(
            "convinit_small_heads",
            cpp_sources=KERNEL_SOURCE,
            functions=["forward", "backward"],
            extra_cflags=BUILD_FLAGS,
        )
    except Exception as exc:  # no compiler, no headers, another platform: torch's attention instead
        detail = " ".join(str(exc).split())[:160]
        warnings.warn(
            f"small-head attention kernel not built ({detail}); using torch's attention", stacklevel=2
        )
        return None


@contextmanager
def small_head_attention_enabled(on: bool = True) -> Iterator[None]:
    """Attention layers use the small-head kernel where it applies, inside this block."""
    before = _ENABLED["on"]
    _ENABLED["on"] = on
    try:
        yield
    finally:
        _ENABLED["on"] = before


def applies(q: torch.Tensor, dropout: float = 0.0) -> bool:
    """Whether the kernel is switched on and takes these (B, H, N, d) queries."""
    return (
        _ENABLED["on"]
        and dropout == 0.0
        and q.device.type == "cpu"
        and q.dtype == torch.float32
        and q.shape[-1] <= SMALL_HEAD_DIM
        and kernel() is not None
    )


class SmallHeadAttention(torch.autograd.Function):
    """softmax(q k^T * scale) v over (B, H, N, d) float32 CPU tensors through the fused kernel; inputs in
    any layout whose head dim is contiguous (a qkv split's views are read in place)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        out, lse = kernel().forward(q, k, v, float(scale))  # out: (B, H, N, d) over (B, N, H, d) memory
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale = float(scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        grad = grad if grad.stride(-1) == 1 else grad.contiguous()
        return (*kernel().backward(q, k, v, out, lse, grad, ctx.scale), None)


def small_head_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale) v through the kernel (the caller has checked `applies`)."""
    return SmallHeadAttention.apply(q, k, v, scale)
