"""Fixtures of the reliability tests: one torch thread, and the uninterrupted reference run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from killable_runs import EXACT_OVERRIDES

from convinit.cli import main


@pytest.fixture(autouse=True)
def one_thread():
    """In-process runs use one thread like the child processes (OMP_NUM_THREADS=1), so that their
    floating-point sums are ordered alike and runs compare bit for bit; it is also faster on 2 busy cores.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def exact_reference(tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must reproduce (trained once per session)."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["train", *EXACT_OVERRIDES, "--out", str(run_dir), "--no-progress"]) == 0
    finally:
        torch.set_num_threads(before)
    return run_dir
