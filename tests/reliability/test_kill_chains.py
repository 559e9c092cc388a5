"""Signals at the awkward moments, and a grid stopped like a run, each resumed bit-identical.

SIGTERM inside an evaluation (the run finishes it, checkpoints at the epoch end, exits 143), inside
the init fit (it stops at once, nothing to lose) and SIGKILL there; a `reproduce --jobs 2` grid stopped
with SIGTERM (a `stopped:` line, exit 143, its children write step checkpoints): each rerun ends
exactly as the uninterrupted run. The full chains (8 random kills of an 8-epoch run, device-resident and
streamed; a grid killed with SIGKILL, whose children the kernel stops the same way) are
benchmarks/kill_chains.py, and `-m slow` here.
"""

from __future__ import annotations

import signal

import pytest
from kill_chains import INIT_FIT_OVERRIDES, Interruption, run_chain, run_grid_chain

SIGTERM, SIGKILL = signal.SIGTERM, signal.SIGKILL


def assert_identical(result) -> None:
    assert result.identical, f"{result.name} after {result.stops}: {result.detail}"


@pytest.mark.slow  # 30 s each on 2 cores; the suite stays under 10 minutes
def test_sigterm_then_sigkill_during_evaluation_resume_to_the_uninterrupted_run(tmp_path):
    stops = [Interruption(["--pause-in-eval", "3"], SIGTERM), Interruption(["--pause-in-eval", "1"], SIGKILL)]
    assert_identical(run_chain(tmp_path, "eval", ["eval_every=1"], stops))


@pytest.mark.slow  # 30 s each on 2 cores; the suite stays under 10 minutes
def test_sigterm_then_sigkill_during_the_init_fit_resume_to_the_uninterrupted_run(tmp_path):
    stops = [Interruption(["--pause-in-init"], SIGTERM), Interruption(["--pause-in-init"], SIGKILL)]
    assert_identical(run_chain(tmp_path, "init", INIT_FIT_OVERRIDES, stops))


def test_a_grid_stopped_by_sigterm_resumes_its_rows_to_the_uninterrupted_grid(tmp_path):
    assert_identical(run_grid_chain(tmp_path, [Interruption(["--pause-at-step", "5"], SIGTERM)]))


@pytest.mark.slow
def test_a_grid_killed_then_stopped_resumes_its_rows_to_the_uninterrupted_grid(tmp_path):
    stops = [Interruption(["--pause-at-step", "4"], SIGKILL), Interruption(["--pause-at-step", "5"], SIGTERM)]
    assert_identical(run_grid_chain(tmp_path, stops))


@pytest.mark.slow
@pytest.mark.parametrize("name, overrides", [("device", []), ("stream", None)])
def test_an_eight_epoch_run_killed_eight_times_at_random_ends_bit_identical(tmp_path, name, overrides):
    from kill_chains import STREAM_OVERRIDES

    overrides = ["epochs=8", *(STREAM_OVERRIDES if overrides is None else overrides)]
    assert_identical(run_chain(tmp_path, name, overrides, kills=8, seed=1))
