"""One run on several processes under SLURM: a job of 2 CPU tasks trains one DDP run (gloo, the ranks and
the master address from SLURM's environment) to the weights of one process with the same global batch,
as tests/train/test_distributed.py checks for torchrun; rank 0 alone writes the run."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from convinit.cli import main
from convinit.config import resolve_config
from convinit.experiments.slurm_job import submit_train
from convinit.runs.checkpoint import latest_checkpoint
from tests.slurm_cluster import slurm, wait_until_ended  # noqa: F401 (a fixture)


@pytest.mark.usefixtures("slurm")
def test_two_cpu_tasks_of_one_slurm_job_train_one_run_like_one_process(tmp_path, tiny_overrides, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # each rank on one thread, as the one process below
    job = submit_train(
        resolve_config(None, tiny_overrides), tmp_path / "ddp", gpus=0, tasks=2, cpus=1, time_minutes=5
    )
    before = torch.get_num_threads()
    try:  # the one process is this one, on one thread like a rank, while the job runs
        assert (
            main(["train", *tiny_overrides, "threads=1", "--no-progress", "--out", str(tmp_path / "single")])
            == 0
        )
    finally:
        torch.set_num_threads(before)
    assert wait_until_ended(job.job_id) in ("COMPLETED", "GONE")
    assert "global_rank=1(2)" in job.task(1).stdout()  # two ranks of one job
    assert (tmp_path / "ddp" / "finished.json").is_file()

    one = load_file(latest_checkpoint(tmp_path / "single") / "model.safetensors")
    two = load_file(latest_checkpoint(tmp_path / "ddp") / "model.safetensors")
    for name, tensor in one.items():  # only the order of floating-point sums differs (all-reduce)
        assert torch.allclose(tensor, two[name], atol=1e-5, rtol=1e-4), name
    rows = [json.loads(row) for row in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    single = [json.loads(row) for row in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(single) == 3  # rank 0 alone wrote the run's rows
    for ours, theirs in zip(rows, single, strict=True):
        assert abs(ours["test_acc"] - theirs["test_acc"]) <= 100 / 797 + 1e-9  # 797 test images: one may flip
