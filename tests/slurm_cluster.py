"""The real SLURM the SLURM tests run against: found, or the test is skipped (outside CI) or fails (in CI).

A helper module, not a test. CI starts a one-node SLURM with scripts/slurm-up before the suite (.ci/run);
a developer does the same on a laptop. Where no `sinfo` answers the SLURM tests are skipped, except under
CI (CI=true), where a SLURM test that would skip fails instead: CI must prove the path every run.
Waiting on SLURM is a bounded poll of its state, never a sleep standing for an event.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
}


def slurm_answers() -> str | None:
    """Why SLURM cannot be used here, or None when `sinfo` answers with an idle node."""
    if shutil.which("sinfo") is None:
        return "no SLURM here (sinfo not on PATH); scripts/slurm-up starts a one-node SLURM"
    try:
        answer = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 20 s"
    if answer.returncode != 0 or not answer.stdout.strip():
        return f"sinfo answered nothing: {answer.stderr.strip()[-200:]}"
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20).stdout
    # a real cluster's queue is no test bench: only the SLURM that scripts/slurm-up starts is used
    if not re.search(r"^ClusterName\s*=\s*convinit\s*$", config, re.M):
        return "this SLURM is not the one scripts/slurm-up starts (ClusterName=convinit)"
    return None


@pytest.fixture(scope="session")
def slurm() -> None:
    """A SLURM to submit to: skipped where there is none, except in CI where that fails."""
    why = slurm_answers()
    if why is None:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(
            f"CI runs the SLURM tests against a real SLURM, and {why}: .ci/run starts one (scripts/slurm-up)"
        )
    pytest.skip(why)


def job_state(job_id: str) -> tuple[str, str, int]:
    """(state, reason, restarts) of a job as SLURM lists it; ('GONE', '', 0) once it no longer does."""
    answer = subprocess.run(
        ["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True, timeout=20
    )
    fields = dict(item.split("=", 1) for item in answer.stdout.split() if "=" in item)
    if answer.returncode != 0 or "JobState" not in fields:
        return "GONE", "", 0
    return fields["JobState"], fields.get("Reason", ""), int(fields.get("Restarts", "0"))


def wait_for(condition, what: str, timeout: float = 120.0, poll: float = 0.2):
    """Poll `condition` (bounded) until it returns something true; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(poll)


def wait_until_ended(job_id: str, timeout: float = 120.0) -> str:
    """The job's final state, once it has ended (requeues included)."""
    return wait_for(
        lambda: (state := job_state(job_id)[0]) in ENDED | {"GONE"} and state,
        f"job {job_id} to end",
        timeout,
    )


def pausing_at_step(monkeypatch, step: int, markers: Path, attempts: str = "0") -> None:
    """Jobs submitted from now on pause before their `step`-th training step in the given attempts
    (`0,1`: the first and the first requeued; see tests/slurm_children) until a signal comes; each pause
    writes `markers/<pid>`."""
    markers.mkdir(parents=True, exist_ok=True)
    children = str(ROOT / "tests" / "slurm_children")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [children, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PAUSING_CHILDREN", f"--pause-at-step {step}")
    monkeypatch.setenv("PAUSING_CHILDREN_MARKERS", str(markers))
    monkeypatch.setenv("PAUSING_ATTEMPTS", attempts)


def pausing_before_torch(monkeypatch, markers: Path) -> None:
    """Jobs submitted from now on pause in their first attempt just before the task first imports torch
    (while it unpickles the job, before submitit or convinit handle any signal) until a signal comes;
    the pause writes `markers/<pid>`. Nothing of the test holds signals there: only the job's own start."""
    markers.mkdir(parents=True, exist_ok=True)
    children = str(ROOT / "tests" / "slurm_children")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [children, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PAUSING_BEFORE_TORCH", str(markers))
