"""These tests fake CUDA on the CPU (`fake_cuda`: FakeTensorMode on `device="cuda"`), which needs a torch
built with CUDA, GPU or not. PyTorch's CPU-only wheels, which the README has CPU machines install, abort
the process on a fake CUDA tensor, so there the tests are skipped, not run into a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
CPU_ONLY_BUILD = "faking CUDA needs a torch built with CUDA; this one is a CPU-only build"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.backends.cuda.is_built():
        return
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.skip(reason=CPU_ONLY_BUILD))
