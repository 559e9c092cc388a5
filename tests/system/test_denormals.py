"""Subnormal floats flushed to zero in every intra-op thread for a while, then the setting put back."""

from __future__ import annotations

import pytest
import torch

from convinit.system.denormals import denormals_flushed, flushes_denormals, flushes_in_every_thread

SMALLEST = torch.tensor([1], dtype=torch.int32).view(torch.float32)  # 1.4e-45, the smallest subnormal


@pytest.fixture
def two_threads():
    """Two intra-op threads whose team already exists (as in a run, where data and init ran before)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    torch.ones(1 << 20).mul_(2.0)  # one parallel region: the OpenMP team starts, unflushed
    yield
    torch.set_flush_denormal(False)
    torch.set_num_threads(before)


def test_unflushed_arithmetic_keeps_the_smallest_subnormal():
    assert not flushes_denormals() and not flushes_in_every_thread()
    assert float(SMALLEST * 2.0) == pytest.approx(2.8e-45, rel=0.01)


def test_torchs_own_switch_reaches_the_calling_thread_only(two_threads):
    """Why the module exists: torch.set_flush_denormal leaves the team's other threads as they were."""
    assert torch.set_flush_denormal(True)
    assert flushes_denormals() and not flushes_in_every_thread()


def test_flushing_reaches_every_thread_and_is_undone_after(two_threads):
    with denormals_flushed() as on:
        assert on and flushes_denormals() and flushes_in_every_thread()
        assert float(SMALLEST * 2.0) == 0.0
    assert not flushes_denormals() and not flushes_in_every_thread()


def test_a_setting_that_was_on_before_stays_on_after(two_threads):
    with denormals_flushed():
        with denormals_flushed():
            pass
        assert flushes_in_every_thread()  # the inner block put back what it found: on
    assert not flushes_in_every_thread()


def test_disabled_changes_nothing():
    with denormals_flushed(False) as on:
        assert not on and not flushes_denormals()
