"""`TrainJob` under submitit: a pre-empted job stops at a step boundary, requeues, and resumes exactly.

submitit's local executor runs the job as a real process under a controller that requeues it when
it exits with submitit's requeue code, as SLURM would; the test sends the preemption signal (USR2)
to that process itself, mid-run, as SLURM does before pre-empting or timing out a job.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import cloudpickle
import pytest
from killable_runs import EXACT_OVERRIDES, assert_same_run, stable_metrics

from convinit.config import resolve_config
from convinit.experiments.slurm_job import TrainJob, submit_train

submitit = pytest.importorskip("submitit")


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            found.append(int(stat.parent.name))
    return found


def wait_for(condition, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


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


def test_preempted_job_requeues_itself_and_ends_like_an_uninterrupted_run(
    tmp_path, monkeypatch, exact_reference
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the reference run (see conftest)
    run_dir = tmp_path / "run"
    cfg = resolve_config(None, EXACT_OVERRIDES)
    job = submit_train(cfg, run_dir, folder=tmp_path / "logs", cluster="local", timeout_min=20)
    controller = int(job.job_id)
    wait_for((run_dir / "checkpoints" / "epoch-0001").is_dir, "the first checkpoint")
    [task] = children(controller)
    os.kill(task, signal.SIGUSR2)  # SLURM's warning before pre-emption or time-out
    wait_for(job.done, "the job to finish")

    final = job.result()
    log = job.stdout()  # submitit's log and the trainer's output, both attempts
    assert "Caught signal SIGUSR2" in log and "Requeued job" in log, log
    assert "stopped: checkpoint" in log  # the trainer saved at a step boundary before the requeue
    assert log.count("Starting with JobEnvironment") == 2
    assert_same_run(run_dir, exact_reference)
    assert {k: v for k, v in final.items() if k not in ("seconds", "images_per_s")} == stable_metrics(
        exact_reference
    )[-1]
