"""The training device and its number formats: device names, autocast precision, memory layout, and
the one-line explanation of a torch.compile failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from convinit.config import TrainConfig
from convinit.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for but CUDA is not available here; use device=cpu or auto")
    if name.startswith("mps") and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} asked for but MPS is not available here; use device=cpu or auto")
    try:
        device = torch.device(name)
    except RuntimeError as exc:  # e.g. cuda:x
        raise ConfigError(
            f"device {name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps"
        ) from exc
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(
            f"device {name!r} asked for but there are {count} CUDA devices (cuda:0 .. cuda:{count - 1})"
        )
    return device


def autocast_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, None for full precision: `auto` is bf16 on CUDA and fp32 elsewhere; bf16 and
    fp16 are used on any device (fp16 needs a GradScaler, see `train`); fp32 and tf32 are not autocast
    (tf32: fp32 tensors, TF32 tensor-core matmuls on CUDA, see `configure_cuda_math`)."""
    if cfg.precision == "fp16":
        return torch.float16
    if cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def configure_cuda_math(cfg: TrainConfig, device: torch.device, backends: Any = torch.backends) -> None:
    """On CUDA: TF32 tensor cores for the fp32 matmuls and convolutions (the ones autocast leaves in fp32,
    or all of them with `precision=tf32`) and cudnn.benchmark, which times the convolution algorithms
    once per input shape (a run's shapes are fixed) and keeps the fastest; `deterministic=true` keeps
    cudnn's default choice. `precision=fp32` keeps strict IEEE fp32 everywhere: the reference.
    `backends` is `torch.backends` (a stand-in in tests)."""
    if device.type != "cuda":
        return
    set_tf32(backends, cfg.precision != "fp32")
    backends.cudnn.benchmark = not cfg.deterministic


def set_tf32(backends: Any, enabled: bool) -> None:
    """TF32 on or off for fp32 matmuls and convolutions, with whichever API this torch has:
    `fp32_precision` (torch 2.9 and later, which deprecates the old flags) or the `allow_tf32` flags."""
    matmul = backends.cuda.matmul
    if hasattr(matmul, "fp32_precision") and hasattr(backends.cudnn, "conv"):
        matmul.fp32_precision = backends.cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"
    else:
        matmul.allow_tf32 = backends.cudnn.allow_tf32 = enabled


def memory_format(cfg: TrainConfig) -> torch.memory_format:
    """channels_last stores a (B, C, H, W) batch as (B, H, W, C), the layout fast convolution kernels
    want (ConvMixer); the weights of a ViT are mostly 2-D and unaffected."""
    return torch.channels_last if cfg.channels_last else torch.contiguous_format


@contextmanager
def explain_compile_failure(enabled: bool) -> Iterator[None]:
    """torch.compile compiles lazily, in the first forward and backward: a failure there (no C++
    compiler, an op the backend cannot lower) ends with one line that names the way out."""
    if not enabled:
        yield
        return
    try:
        yield
    except torch._dynamo.exc.TorchDynamoException as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if lines else ""
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        raise ConfigError(
            f"torch.compile failed ({type(exc).__name__}: {detail}); set compile=false to train without it"
        ) from exc
