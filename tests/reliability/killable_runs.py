"""Shared by the reliability tests: run `convinit` as a real process, wait for a point in its run,
and compare a run directory with an uninterrupted reference. A helper module, not a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file

from convinit.runs.checkpoint import list_checkpoints

PAUSING_TRAIN = Path(__file__).with_name("pausing_train.py")
VOLATILE = {"seconds", "images_per_s"}  # wall-clock figures, the only metrics a resume may change

# A seconds-long run that exercises every piece of state a resume must restore: model, optimiser,
# cosine schedule, EMA, the RNG streams of crop/flip/mixup, and a non-default init (mimetic) that
# a restart without any checkpoint must redo. 3 epochs of 10 steps on digits.
EXACT_OVERRIDES = [
    "epochs=3",
    "batch_size=100",
    "model_args.depth=2",
    "model_args.dim=32",
    "model_args.heads=2",
    "model_args.dim_head=16",
    "model_args.mlp_dim=64",
    "warmup_epochs=0",
    "lr=3e-3",
    "device=cpu",
    "deterministic=true",
    "init=mimetic",
    "hflip=true",
    "crop_padding=1",
    "mixup=0.2",
    "ema_decay=0.9",
]


def child_env() -> dict[str, str]:
    """One thread, as the in-process runs use (see conftest): float sums then match bit for bit."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def start_cli(args: list[str], wrapper: list[str] | None = None) -> subprocess.Popen:
    """`python -m convinit ARGS`, or with `wrapper` options the same through pausing_train.py."""
    command = [sys.executable, "-m", "convinit"]
    if wrapper:
        command = [sys.executable, str(PAUSING_TRAIN), *wrapper, "--"]
    return subprocess.Popen(
        command + args, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_until(
    condition: Callable[[], bool], process: subprocess.Popen | None, what: str, timeout: float = 300.0
):
    """Poll `condition` until true; fail with the child's output if it exits first or never gets there
    (`process` None: no process to watch)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"process exited ({process.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            if process is not None:
                process.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def stable_metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]


def final_tensors(run_dir: Path) -> dict[str, torch.Tensor]:
    """Model and EMA tensors of the newest checkpoint, keyed `file/name`."""
    newest = list_checkpoints(run_dir)[-1]
    tensors = {}
    for file in sorted(newest.glob("*.safetensors")):
        tensors.update({f"{file.name}/{k}": v for k, v in load_file(file).items()})
    return tensors


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """Bit-identical final weights and identical metrics (but wall-clock figures), nothing lost."""
    assert list_checkpoints(run_dir)[-1].name == list_checkpoints(reference)[-1].name
    got, want = final_tensors(run_dir), final_tensors(reference)
    assert got.keys() == want.keys()
    different = [name for name in want if not torch.equal(got[name], want[name])]
    assert not different, f"tensors differ from the uninterrupted run: {different}"
    assert stable_metrics(run_dir) == stable_metrics(reference)
    csv_rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    assert len(csv_rows) == len(stable_metrics(reference))
    assert (run_dir / "finished.json").is_file()
    assert not list((run_dir / "checkpoints").glob("*.tmp")), "a stale .tmp folder survived"
