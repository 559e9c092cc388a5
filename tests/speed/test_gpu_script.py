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
    killed, resumed = [line for line in lines if line["stage"] == "train"]
    assert (killed["part"], killed["exit"]) == ("killed", 143)  # SIGTERM after the first epoch's checkpoint
    assert killed["stopped_at"].startswith("epoch-")  # where SIGTERM found it: epoch 1 or a bit after
    assert (resumed["part"], resumed["exit"], resumed["epochs"]) == ("resumed", 0, 4)
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


SCRIPT = ROOT / "benchmarks" / "gpu.sh"
LIMIT_S = 420  # a ten-minute GPU slot with time left for a rerun


def bash(*args: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
    )  # fmt: skip


@pytest.mark.parametrize("install", ["1", "0"])
def test_every_stage_with_its_kill_grace_fits_in_420_seconds_install_or_not(install):
    done = bash(DRY_RUN="1", INSTALL=install)
    lines = done.stdout.splitlines()
    stages = [line.split()[1] for line in lines if line.startswith("stage ")]
    assert stages == (["install"] if install == "1" else []) + STAGES
    worst = sum(int(line.split()[3]) + int(line.split()[5]) for line in lines if line.startswith("stage "))
    assert lines[-1] == f"worst case {worst} s" and worst <= LIMIT_S


def test_the_kill_trigger_waits_for_a_published_checkpoint_not_its_tmp_folder(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "epoch-0001.tmp").mkdir(parents=True)
    (checkpoints / "epoch-0001.tmp" / "manifest.json").write_text("{}")
    assert bash("--published", str(tmp_path)).returncode == 1
    (checkpoints / "epoch-0001.tmp").rename(checkpoints / "epoch-0001")  # what publishing does
    assert bash("--published", str(tmp_path)).returncode == 0


def test_a_rerun_appends_to_the_results_after_a_start_line(tmp_path):
    for _ in range(2):  # no stage: only the start line; PYTHON=false prints the file itself as summary
        assert bash(OUT=str(tmp_path), STAGES="none", INSTALL="0", PYTHON="false").returncode == 0
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [line["stage"] for line in lines] == ["start", "start"]


def test_a_train_stage_cut_by_its_cap_records_what_the_run_logged(tmp_path):
    """A stand-in for `convinit train` logs one epoch and leaves only a `.tmp` checkpoint (the trigger
    must not fire), then hangs: the cap's SIGTERM makes the stage record the epoch and no checkpoint."""
    stub = tmp_path / "python"
    stub.write_text(f"""#!/usr/bin/env bash
if [[ "$1 $2 $3" == "-m convinit train" ]]; then
    run="${{@: -1}}"
    mkdir -p "$run/checkpoints/epoch-0001.tmp"
    echo '{{"epoch": 1, "images_per_s": 5.0, "test_acc": 50.0}}' >"$run/metrics.jsonl"
    exec sleep 30
fi
exec {sys.executable} "$@"
""")
    stub.chmod(0o755)
    env = dict(OUT=str(tmp_path / "out"), PYTHON=str(stub), SCALE="tiny", DEVICE="cpu")
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        ["timeout", "3", "bash", str(SCRIPT), "--stage", "train"], capture_output=True, text=True, timeout=30,
        cwd=ROOT, env={"PATH": os.environ["PATH"], **env},
    )  # fmt: skip
    assert done.returncode == 124, done.stderr
    (line,) = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert (line["part"], line["epochs"], line["stopped_at"], line["test_acc"]) == ("cut", 1, None, 50.0)
