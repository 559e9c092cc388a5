"""SLURM's warning can come while a task still starts (imports torch, unpickles the job): the task holds
it from its first line (experiments.slurm_start) and acts on it once the job's handler is in place, so
the job requeues itself and ends exact instead of dying of USR2 and ending FAILED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from killable_runs import EXACT_OVERRIDES
from test_slurm_requeue import ONE_CPU, assert_requeued_and_exact

from convinit.config import resolve_config
from convinit.experiments.slurm_job import submit_train
from tests.slurm_cluster import pausing_before_torch, slurm, wait_for  # noqa: F401 (a fixture)

TARGET = """
import os, signal, sys
from convinit.system.held_signals import HELD, deliver_held
os.kill(os.getpid(), signal.SIGUSR2)  # the warning while the job still imports
assert HELD == [signal.SIGUSR2], HELD
signal.signal(signal.SIGUSR2, lambda signum, frame: print("acted on", signum, "args", sys.argv[1:]))
assert deliver_held() and not deliver_held()  # delivered once
"""


def test_a_warning_while_the_task_starts_is_held_and_delivered_once_its_handler_is_in_place(tmp_path):
    (tmp_path / "starting_job.py").write_text(TARGET)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    command = ["-u", "-m", "convinit.experiments.slurm_start", "-u", "-m", "starting_job", "FOLDER"]
    started = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"acted on {int(signal.SIGUSR2)} args ['FOLDER']"
    # without the first line's hold the same warning ends the process, as it ended SLURM tasks
    bare = subprocess.run([sys.executable, "-m", "starting_job"], env=env, capture_output=True, timeout=60)
    assert bare.returncode == -signal.SIGUSR2


@pytest.mark.usefixtures("slurm")
def test_a_warning_before_the_job_imports_torch_requeues_it_and_it_ends_exact(
    tmp_path, monkeypatch, exact_reference
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the reference run (see conftest)
    markers = tmp_path / "paused"
    pausing_before_torch(monkeypatch, markers)
    run_dir = tmp_path / "early"
    # --requeues 0 and a 10-minute limit: the warning is a pre-emption's, which never counts as a time-out
    job = submit_train(resolve_config(None, EXACT_OVERRIDES), run_dir, time_minutes=10, requeues=0, **ONE_CPU)
    wait_for(lambda: any(markers.iterdir()), "the task to pause before it imports torch")
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True)
    log = assert_requeued_and_exact(job, run_dir, exact_reference)
    assert "stopped: warned before training started, nothing lost" in log, log
