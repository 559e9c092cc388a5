"""torchrun with 2 CPU processes (gloo) trains to the weights of one process with the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

from convinit.train.checkpoint import latest_checkpoint


def run(argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path, tiny_overrides):
    args = ["train", *tiny_overrides, "--no-progress"]
    single = run([sys.executable, "-m", "convinit", *args, "--out", str(tmp_path / "single")])
    assert single.returncode == 0, single.stderr[-2000:]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    launcher += ["--master_port", "29571"]
    ddp = run([*launcher, "-m", "convinit", *args, "--out", str(tmp_path / "ddp")])
    assert ddp.returncode == 0, ddp.stderr[-2000:]

    one = load_file(latest_checkpoint(tmp_path / "single") / "model.safetensors")
    two = load_file(latest_checkpoint(tmp_path / "ddp") / "model.safetensors")
    # Each rank takes every second sample of the epoch order, so the union of the two half-batches is the
    # single process's batch; only the order of floating-point sums differs (gradient all-reduce).
    for name, tensor in one.items():
        assert torch.allclose(tensor, two[name], atol=1e-5, rtol=1e-4), name
    # rank 0 alone wrote the run's files: one metrics row per epoch plus the initial row
    rows = (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3
