"""A real SLURM time limit: its warning ends in a checkpoint and a requeue that ends exact while the job
has time-out requeues left (--requeues), and in failed.json saying why once it has none.

Both jobs run at once (one CPU each); see test_slurm_requeue.py for the pausing jobs.
"""

from __future__ import annotations

import json

import pytest
from test_slurm_requeue import assert_requeued_and_exact, paused_job

from tests.slurm_cluster import slurm, wait_until_ended  # noqa: F401 (a fixture)

UP_TO_FOUR_ATTEMPTS_S = 4 * 180 + 4 * 30  # --requeues 3: four 3-minute attempts and SLURM's restarts


@pytest.mark.usefixtures("slurm")
def test_the_time_limit_requeues_a_run_with_requeues_left_and_fails_one_without_saying_why(
    tmp_path, monkeypatch, exact_reference
):
    # three minutes, warned 90 s before (SLURM may warn up to 60 s earlier): the warning comes 30-90 s in,
    # while each job waits at its 11th step; an attempt that does not pause ends long before 30 s
    limit = {"time_minutes": 3, "signal_delay_s": 90}
    timed, run_dir, _ = paused_job(tmp_path, monkeypatch, "timed", **limit)
    out_of_requeues, failed_dir, _ = paused_job(tmp_path, monkeypatch, "failed", requeues=0, **limit)
    # each attempt may meet its own warning before it ends: up to 4 attempts
    log = assert_requeued_and_exact(timed, run_dir, exact_reference, timeout=UP_TO_FOUR_ATTEMPTS_S)
    assert "timed-out" in log and "the SLURM job requeues itself" in log, log
    # the limit may end it while it writes why (TIMEOUT): failed.json is the answer either way
    assert wait_until_ended(out_of_requeues.job_id, UP_TO_FOUR_ATTEMPTS_S) in ("FAILED", "TIMEOUT", "GONE")
    reason = json.loads((failed_dir / "failed.json").read_text())["reason"]
    assert "time limit more often than --requeues allows" in reason
    assert not (failed_dir / "finished.json").exists()
