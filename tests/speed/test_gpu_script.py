"""benchmarks/gpu.sh on its CPU path: every stage runs in order and reports, and a failing stage hides
nothing of the others'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convinit.speed.gpu import AUDIT_CASES

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["fabricate", "audit", "steps", "train", "stream", "ddp"]


def run_script(out: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    base = {
        "PATH": os.environ["PATH"],
        "PYTHON": sys.executable,
        "SCALE": "tiny",
        "INSTALL": "0",
        "OUT": str(out),
    }
    if "PYTHONPATH" in os.environ:
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu.sh")],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env={**base, "OMP_NUM_THREADS": "1", **env},
    )  # fmt: skip
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return done, lines


@pytest.mark.slow  # about 100 s on two CPU cores: every stage, toy sizes
def test_gpu_script_runs_every_stage_in_order_on_the_cpu_path_and_prints_the_summary(tmp_path):
    done, lines = run_script(tmp_path / "out", DEVICE="cpu")
    assert done.returncode == 0, done.stdout[-3000:]
    statuses = [(line["name"], line["status"]) for line in lines if line["stage"] == "status"]
    assert statuses == [(name, "ok") for name in STAGES]
    assert {line["case"] for line in lines if line["stage"] == "audit"} == set(AUDIT_CASES)
    assert all("error" not in line for line in lines)
    (train,) = [line for line in lines if line["stage"] == "train"]
    assert (train["killed_exit"], train["resumed_exit"], train["epochs"]) == (143, 0, 4)  # SIGTERM, resumed
    assert [line["stage"] for line in lines if line["stage"] in ("stream", "ddp")] == ["stream", "ddp"]
    assert "== audit" in done.stdout and "== ddp" in done.stdout  # the summary


def test_a_failing_stage_is_marked_and_the_others_still_report(tmp_path):
    """On a machine without CUDA the CUDA stages fail; the CPU-only ones still run and report, the
    summary is printed, and the script exits 1."""
    done, lines = run_script(tmp_path / "out", DEVICE="cuda", STAGES="stream steps")
    assert done.returncode == 1
    statuses = dict((line["name"], line["status"]) for line in lines if line["stage"] == "status")
    assert list(statuses) == ["steps", "stream"]  # in the script's order
    assert statuses["steps"].startswith("failed") and statuses["stream"] == "ok"
    assert any(line["stage"] == "stream" and line["images_per_s"] > 0 for line in lines)
    assert "== stream" in done.stdout
