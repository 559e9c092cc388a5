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
import logging
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
// n = round(t), |f| <= 1/2, 2^f by Cephes' exp2f polynomial, 2^n written into the exponent bits; 0 below
// -87 (float32's subnormal range, which a CPU computes slowly: an absolute error under 1.2e-38).
static inline float exp_nonpositive(float x) {
  const bool underflows = x < -87.f;
  x = underflows ? -87.f : x;
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
  return underflows ? 0.f : p * two_n;
}

// rows padded to a multiple of 16 keys (a whole number of vectors): padded keys get no weight
static inline int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }
static inline void mask_padding(float* s, int64_t n, int64_t np) {
  for (int64_t j = n; j < np; ++j) s[j] = -1e30f;
}

// the loops over a row's N keys, on unaliased buffers so that the compiler vectorises them
static inline void axpy(float* __restrict__ y, const float* __restrict__ x, float a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}
static inline float dot(const float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  float acc = 0.f;
  for (int64_t j = 0; j < n; ++j) acc += x[j] * y[j];
  return acc;
}
static inline float row_max(const float* __restrict__ x, int64_t n) {
  float lanes[16];  // 16 running maxima, each a plain select the compiler vectorises, then reduced
  for (int64_t l = 0; l < 16; ++l) lanes[l] = x[0];
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int64_t l = 0; l < 16; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  float m = x[0];
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  for (int64_t l = 0; l < 16; ++l) m = lanes[l] > m ? lanes[l] : m;
  return m;
}
// p_j = exp(s_j - shift) in place; returns their sum
static inline float exp_shifted(float* __restrict__ s, float shift, int64_t n) {
  float z = 0.f;
  for (int64_t j = 0; j < n; ++j) { s[j] = exp_nonpositive(s[j] - shift); z += s[j]; }
  return z;
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
  const int64_t np = padded(n);  // columns n..np stay 0
  for (int64_t j = 0; j < n; ++j) {
    const float* r = src.row(bh, j);
    for (int64_t c = 0; c < d; ++c) dst[c * np + j] = r[c] * factor;
  }
}

// (B, H, N, d) in the memory order of (B, N, H, d): what the heads' merge and the qkv split read freely
static torch::Tensor like_tokens_major(const torch::Tensor& t) {
  return torch::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
}

// One query row: scores over the np (padded) keys, their softmax, the value product; returns the row's
// log-sum-exp. D > 0: the head dim known at compile time, so each pass over the keys keeps the D
// products of a key vector in registers (one pass, not D); D = 0: any head dim, d at run time.
template <int D>
static float forward_row(const float* qi, const float* __restrict__ kt, const float* __restrict__ vt,
                         float* __restrict__ s, float* oi, int64_t d, int64_t n, int64_t np) {
  const int64_t dd = D > 0 ? D : d;
  for (int64_t j = 0; j < np; ++j) {
    float acc = 0.f;
    for (int64_t c = 0; c < dd; ++c) acc += qi[c] * kt[c * np + j];
    s[j] = acc;
  }
  mask_padding(s, n, np);
  const float m = row_max(s, np);
  const float z = exp_shifted(s, m, np);
  for (int64_t c = 0; c < dd; ++c) oi[c] = dot(s, vt + c * np, np) / z;
  return m + std::log(z);
}

// One query row's share of the gradients: dq_i, and its terms of dk and dv (accumulated, (d, np)).
template <int D>
static void backward_row(const float* qi, const float* gi, const float* oi, float lse, float sc,
                         const float* __restrict__ kt, const float* __restrict__ vt, float* __restrict__ p,
                         float* __restrict__ ds, float* __restrict__ dkt, float* __restrict__ dvt, float* dqi,
                         int64_t d, int64_t n, int64_t np) {
  const int64_t dd = D > 0 ? D : d;
  float delta = 0.f;  // sum_j p_j dp_j = grad_i . out_i
  for (int64_t c = 0; c < dd; ++c) delta += gi[c] * oi[c];
  for (int64_t j = 0; j < np; ++j) {
    float score = 0.f, dp = 0.f;
    for (int64_t c = 0; c < dd; ++c) { score += qi[c] * kt[c * np + j]; dp += gi[c] * vt[c * np + j]; }
    p[j] = score * sc;
    ds[j] = dp;
  }
  mask_padding(p, n, np);
  exp_shifted(p, lse, np);  // the weights, from the saved log-sum-exp
  for (int64_t j = 0; j < np; ++j) ds[j] = p[j] * (ds[j] - delta);
  for (int64_t c = 0; c < dd; ++c) {
    dqi[c] = dot(ds, kt + c * np, np) * sc;
    axpy(dkt + c * np, ds, qi[c] * sc, np);
    axpy(dvt + c * np, p, gi[c], np);
  }
}

// f.template operator()<D>() with the head dim as a compile-time constant where it is a common one
template <typename F>
static void with_head_dim(int64_t d, F&& f) {
  switch (d) {
    case 1: f.template operator()<1>(); break;
    case 2: f.template operator()<2>(); break;
    case 4: f.template operator()<4>(); break;
    case 8: f.template operator()<8>(); break;
    default: f.template operator()<0>();
  }
}

std::vector<torch::Tensor> forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
  check(q); check(k); check(v);
  const int64_t pairs = q.size(0) * q.size(1), n = q.size(2), d = q.size(3);
  auto out = like_tokens_major(q);
  auto lse = torch::empty({pairs, n}, q.options());
  const Rows Q(q), K(k), V(v), O(out);
  float* L = lse.data_ptr<float>();
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    const int64_t np = padded(n);
    std::vector<float> kt(d * np, 0.f), vt(d * np, 0.f), s(np);
    for (int64_t bh = begin; bh < end; ++bh) {
      transpose_into(K, bh, n, d, (float)scale, kt.data());
      transpose_into(V, bh, n, d, 1.f, vt.data());
      with_head_dim(d, [&]<int D>() {
        for (int64_t i = 0; i < n; ++i)
          L[bh * n + i] =
              forward_row<D>(Q.row(bh, i), kt.data(), vt.data(), s.data(), O.row(bh, i), d, n, np);
      });
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
    const int64_t np = padded(n);
    std::vector<float> kt(d * np, 0.f), vt(d * np, 0.f), dkt(d * np), dvt(d * np), p(np), ds(np);
    for (int64_t bh = begin; bh < end; ++bh) {
      transpose_into(K, bh, n, d, 1.f, kt.data());
      transpose_into(V, bh, n, d, 1.f, vt.data());
      std::fill(dkt.begin(), dkt.end(), 0.f);
      std::fill(dvt.begin(), dvt.end(), 0.f);
      with_head_dim(d, [&]<int D>() {
        for (int64_t i = 0; i < n; ++i)
          backward_row<D>(Q.row(bh, i), G.row(bh, i), O.row(bh, i), L[bh * n + i], sc, kt.data(), vt.data(),
                          p.data(), ds.data(), dkt.data(), dvt.data(), DQ.row(bh, i), d, n, np);
      });
      for (int64_t j = 0; j < n; ++j) {
        float *dkj = DK.row(bh, j), *dvj = DV.row(bh, j);
        for (int64_t c = 0; c < d; ++c) { dkj[c] = dkt[c * np + j]; dvj[c] = dvt[c * np + j]; }
      }
    }
  });
  return {dq, dk, dv};
}
"""
# vectorised loops need reassociation; no -ffinite-math-only (the kernel keeps IEEE infinities)
BUILD_FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"]
# the instruction set of torch's own CPU dispatch, never -march=native: a build cached in a home folder that
# several machines share (a cluster's nodes) must run on each of them, and its name says which set it uses
TARGETS = {"AVX512": ["-march=x86-64-v4"], "AVX2": ["-march=x86-64-v3"]}


@functools.lru_cache(maxsize=1)
def kernel() -> Any | None:
    """The built kernel module, or None (with one warning) where it cannot be built."""
    # torch logs "No CUDA runtime is found" on import: a CPU build needs none; the line reads like an error
    quiet = logging.getLogger("torch.utils.cpp_extension")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils.cpp_extension import load_inline

        capability = torch.backends.cpu.get_cpu_capability()
        return load_inline(
            f"convinit_small_heads_{capability.lower()}",
            cpp_sources=KERNEL_SOURCE,
            functions=["forward", "backward"],
            extra_cflags=BUILD_FLAGS + TARGETS.get(capability, []),
        )
    except Exception as exc:  # no compiler, no headers, another platform: torch's attention instead
        detail = " ".join(str(exc).split())[:160]
        warnings.warn(
            f"small-head attention kernel not built ({detail}); using torch's attention", stacklevel=2
        )
        return None
    finally:
        quiet.setLevel(level)


def kernel_layers(model: torch.nn.Module) -> int:
    """How many of `model`'s attention layers the kernel would run: those that attend through
    `layers.scaled_attention` (they carry `kernel_head_dim`) with heads of dim at most SMALL_HEAD_DIM and
    no attention dropout. Read from the modules, so it works on a model built on the meta device."""
    return sum(
        1
        for module in model.modules()
        if (dim := getattr(module, "kernel_head_dim", None)) is not None
        and dim <= SMALL_HEAD_DIM
        and not getattr(module, "attn_drop_p", 0.0)
    )


def build_failure() -> str | None:
    """Why the kernel cannot be built here (one line), or None once it is built (a minute the first time)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = kernel()
    if built is not None:
        return None
    return str(caught[0].message) if caught else "small-head attention kernel not built"


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
