"""What the machine can do: its measured dense matmul rate, the ceiling for any model's FLOP/s."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch

from convinit.bench.timing import interleaved_medians


def matmul_rate(device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """Measured FLOP/s of a square (size x size) matmul, the best case for this device and dtype.

    2048 on a CPU (large enough to leave the caches' regime, small enough to take well under a
    second), 8192 on a GPU.
    """
    size = size or (8192 if device.type == "cuda" else 2048)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    timing = interleaved_medians({"mm": lambda: torch.mm(a, b, out=out)}, device, warmup=2, repeats=repeats)
    return 2 * size**3 / timing["mm"]["median"]


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
