"""torchrun with 2 CPU processes (gloo) trains to the weights of one process with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

from convinit.cli import main
from convinit.runs.checkpoint import latest_checkpoint


def run(argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path, tiny_overrides):
    args = ["train", *tiny_overrides, "--no-progress"]
    # the one process is this one (a second interpreter would only add its imports), on one thread like a rank
    before = torch.get_num_threads()
    try:
        assert main([*args, "threads=1", "--out", str(tmp_path / "single")]) == 0
    finally:
        torch.set_num_threads(before)  # a run sets torch's threads and leaves them
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    launcher += ["--standalone"]  # a free port of its own: two suites (or two test workers) never collide
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
    # each rank evaluated half of the test set and the sums were all-reduced: the whole set's figures
    single_rows = [
        json.loads(row) for row in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines()
    ]
    for ours, theirs in zip(map(json.loads, rows), single_rows, strict=True):
        assert abs(ours["test_acc"] - theirs["test_acc"]) <= 100 / 797 + 1e-9  # 797 test images: one may flip
        assert abs(ours["test_loss"] - theirs["test_loss"]) < 1e-3


def test_each_rank_draws_its_own_augmentations_and_an_epochs_draws_are_reproducible():
    from convinit.train.process import seed_everything, seed_rank_epoch

    draws = []
    for rank in (0, 1):
        seed_everything(7, deterministic=False, rank=rank)
        draws.append(torch.rand(4))
    assert not torch.equal(draws[0], draws[1])
    seed_everything(8, deterministic=False)  # timm's rule: seed + rank
    assert torch.equal(torch.rand(4), draws[1])
    epochs = []
    for rank, epoch in ((0, 3), (1, 3), (0, 4), (0, 3)):
        seed_rank_epoch(7, rank, epoch)
        epochs.append(torch.rand(4))
    assert torch.equal(epochs[0], epochs[3]) and not torch.equal(epochs[0], epochs[1])
    assert not torch.equal(epochs[0], epochs[2])
