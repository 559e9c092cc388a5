"""What the machine can do: its measured dense matmul rate, the ceiling for any model's FLOP/s."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import torch

from convinit.speed.timing import interleaved_medians


def matmul_size(device: torch.device) -> int:
    """2048 on a CPU (past the caches, well under a second on 2 cores), 8192 on a GPU."""
    return 8192 if device.type == "cuda" else 2048


def matmul_flops(device: torch.device) -> int:
    return 2 * matmul_size(device) ** 3


def square_matmul(device: torch.device, dtype: torch.dtype) -> Callable[[], None]:
    """One dense square matmul, the best case for this device and dtype: a timing case."""
    size = matmul_size(device)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


def matmul_rate(device: torch.device, dtype: torch.dtype, repeats: int = 5) -> float:
    """Measured FLOP/s of the square matmul (median of `repeats`)."""
    timing = interleaved_medians({"mm": square_matmul(device, dtype)}, device, warmup=2, repeats=repeats)
    return matmul_flops(device) / timing["mm"]["median"]


def cpu_name() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(device: torch.device) -> dict[str, Any]:
    """Facts a reader needs to compare figures across machines."""
    facts: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(device)
    return facts
