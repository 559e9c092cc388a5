"""`TrainJob` on a real SLURM: every way SLURM stops a job ends in a checkpoint and a requeue, and the
requeued job ends bit-identical to an uninterrupted run; a run that cannot go on says why in failed.json.

A job's first attempts pause before their 11th training step (tests/slurm_children) until SLURM's
signal comes: submitit's pre-emption warning (USR2, sent here with `scancel --signal`), SIGTERM
from `scontrol requeue`, or the warning of a real time limit (test_slurm_time_limit.py). The run is 30
steps: stopped at step 11 and then 22, the third attempt runs to the end.
"""

from __future__ import annotations

import subprocess

import cloudpickle
import pytest
from killable_runs import EXACT_OVERRIDES, assert_same_run, stable_metrics

from convinit.config import resolve_config
from convinit.experiments.slurm_job import TrainJob, submit_train
from tests.slurm_cluster import pausing_at_step, slurm, wait_for, wait_until_ended  # noqa: F401

submitit = pytest.importorskip("submitit")
ONE_CPU = {"gpus": 0, "cpus": 1}


def test_checkpoint_resubmits_a_fresh_job_on_the_same_run_dir(tmp_path):
    cfg = resolve_config(None, EXACT_OVERRIDES)
    job = TrainJob(tmp_path / "run", cfg)
    delayed = job.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert isinstance(delayed.function, TrainJob) and delayed.function is not job
    assert delayed.function.run_dir == str(tmp_path / "run") and delayed.function.cfg == cfg
    assert delayed.args == () and delayed.kwargs == {}
    restored = cloudpickle.loads(cloudpickle.dumps(delayed))  # what submitit writes for the requeue
    assert restored.function.run_dir == job.run_dir


def paused_job(tmp_path, monkeypatch, name: str, attempts: str = "0", **options) -> tuple:
    """A job on a fresh run whose `attempts` pause before their 11th step until a signal comes; (job,
    run dir, folder of the pauses' markers)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the reference run (see conftest)
    markers = tmp_path / f"{name}-paused"
    pausing_at_step(monkeypatch, 11, markers, attempts)
    run_dir = tmp_path / name
    job = submit_train(resolve_config(None, EXACT_OVERRIDES), run_dir, **ONE_CPU, **options)
    return job, run_dir, markers


def assert_requeued_and_exact(
    job, run_dir, exact_reference, attempts: int = 2, timeout: float = 120.0
) -> str:
    """The job ended after `attempts` - 1 requeues (or more) like the uninterrupted run; its log."""
    assert wait_until_ended(job.job_id, timeout) in ("COMPLETED", "GONE")
    log = job.stdout() + (job.stderr() or "")
    assert "Traceback" not in log, log
    assert log.count("Starting with JobEnvironment") >= attempts, log
    assert (run_dir / "finished.json").is_file() and not (run_dir / "failed.json").exists()
    assert_same_run(run_dir, exact_reference)
    assert job.result()["epoch"] == stable_metrics(exact_reference)[-1]["epoch"]
    return log


@pytest.mark.usefixtures("slurm")
def test_a_preempted_then_requeued_job_resumes_each_time_without_spending_a_time_out_and_ends_exact(
    tmp_path, monkeypatch, exact_reference
):
    # --requeues 0 and a 10-minute limit: submitit would count the warning as a time-out and give up
    job, run_dir, markers = paused_job(tmp_path, monkeypatch, "preempted", "0,1", time_minutes=10, requeues=0)
    wait_for(lambda: len(list(markers.iterdir())) == 1, "the job to pause mid-run")
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True)  # SLURM's pre-emption warning
    wait_for(lambda: len(list(markers.iterdir())) == 2, "the requeued job to pause again")
    subprocess.run(["scontrol", "requeue", job.job_id], check=True)  # SIGTERM, then SLURM requeues it
    log = assert_requeued_and_exact(job, run_dir, exact_reference, attempts=3)
    preempted, requeued = log.split("stopped: checkpoint")[1:]
    assert "the SLURM job requeues itself" in preempted and "SLURM requeued the job" in requeued, log
    assert "convinit train --resume" not in log
