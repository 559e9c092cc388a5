"""Every reproduction of a bad input or a wrong result ends in one line and a non-zero exit.

One table row per reproduction: the argv of `convinit` (built in a fresh temporary folder), the exit
code and a part of the one line after `convinit: error: `. Bad input exits 2 before any training step;
a run that would have reported a wrong result exits 3. Each row runs `convinit.cli.main` in-process.
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_bad_input_table import IDX_FILES, TINY, write_idx

from convinit.cli import main
from convinit.config import resolve_config, save_config
from convinit.runs.checkpoint import save_checkpoint


def idx_dir(tmp: Path, train_images: int = 20, train_label: int = 0) -> Path:
    """Fashion-MNIST-shaped IDX files with `train_images` training images, all labelled `train_label`."""
    root = tmp / "idx"
    root.mkdir()
    for name in IDX_FILES:
        count = train_images if name.startswith("train") else 20
        shape = (count, 28, 28) if "images" in name else (count,)
        label = train_label if name.startswith("train") else 0
        write_idx(root / name, np.full(shape, label if "labels" in name else 0))
    return root


def gzip_bomb_dir(tmp: Path) -> Path:
    """Train images whose header promises 20 images, followed by 256 MiB of zeros (a 256 KiB .gz)."""
    root = idx_dir(tmp)
    images = root / "train-images-idx3-ubyte"
    block = bytes(1 << 20)
    with gzip.open(str(images) + ".gz", "wb", compresslevel=1) as f:
        f.write(images.read_bytes())
        for _ in range(256):
            f.write(block)
    images.unlink()
    return root


def folder_with_symlink_loop(tmp: Path) -> Path:
    from PIL import Image

    root = tmp / "images"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("L", (8, 8), color=i * 40).save(root / name / f"{i}.png")
    (root / "loop").symlink_to(root)
    return root


def file_at(path: Path, data: bytes = b"x") -> Path:
    path.write_bytes(data)
    return path


def experiment(tmp: Path, text: str) -> str:
    path = tmp / "exp.yaml"
    path.write_text(text)
    return str(path)


def run_with_damaged_checkpoints(tmp: Path) -> str:
    run_dir = tmp / "damaged"
    save_config(resolve_config(None, TINY), run_dir.mkdir() or run_dir / "config.yaml")
    checkpoint = save_checkpoint(run_dir, torch.nn.Linear(2, 2), {"epoch": 1, "step": 0}, 1)
    (checkpoint / "model.safetensors").write_bytes(b"garbage")
    return str(run_dir)


def run_with_checkpoint(tmp: Path, model: torch.nn.Module | None, train_state: dict) -> str:
    """A run whose one intact checkpoint holds `model` (None: the configured model) and `train_state`."""
    from convinit.train.plan import resolve_plan

    cfg = resolve_config(None, TINY)
    run_dir = tmp / "run-with-checkpoint"
    run_dir.mkdir()
    save_config(cfg, run_dir / "config.yaml")
    save_checkpoint(run_dir, model or resolve_plan(cfg).model.build(), train_state, 1)
    return str(run_dir)


def run_with_config(tmp: Path, text: str) -> str:
    run_dir = tmp / "cut"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(text)
    return str(run_dir)


def self_extending_preset(tmp: Path) -> str:
    (tmp / "sub").mkdir()
    file_at(tmp / "sub" / "a.yaml", b"extends: b.yaml\nepochs: 1\n")
    file_at(tmp / "sub" / "b.yaml", b"extends: a.yaml\n")
    return str(tmp / "sub" / "a.yaml")


T = ["train", *TINY, "--no-progress"]
# id -> (argv given the temporary folder, exit code, part of the one line)
ROWS = {
    "clip-grad-negative": (lambda t: [*T, "clip_grad=-1"], 2, "'clip_grad' must be positive or null"),
    "min-lr-above-lr": (lambda t: [*T, "min_lr=1"], 2, "min_lr (1.0, set by you) must be below lr"),
    "lr-nan": (lambda t: [*T, "lr=nan"], 2, "'lr' must be a finite number"),
    "lr-inf": (lambda t: [*T, "lr=inf"], 2, "'lr' must be a finite number"),
    "warmup-nan": (lambda t: [*T, "warmup_epochs=nan"], 2, "'warmup_epochs' must be a finite number"),
    "weight-decay-nan": (lambda t: [*T, "weight_decay=nan"], 2, "'weight_decay' must be a finite number"),
    "seed-24-digits": (lambda t: [*T, "seed=123456789012345678901234"], 2, "'seed' must be in [0, 2**63)"),
    "crop-padding-huge": (lambda t: [*T, "crop_padding=100000"], 2, "'crop_padding' must be at most 64"),
    "track-nested-list": (lambda t: [*T, "track=[[a]]"], 2, "'track' must be a list of names"),
    "config-not-utf8": (
        lambda t: [*T, "--config", str(file_at(t / "bad.yaml", b"epochs: \xff\xfe\n"))],
        2,
        "is not UTF-8 text",
    ),
    "extends-loop": (lambda t: [*T, "--config", self_extending_preset(t)], 2, "extends itself in a loop"),
    "out-empty": (lambda t: [*T, "--out", ""], 2, "--out is empty"),
    "out-is-a-file": (lambda t: [*T, "--out", str(file_at(t / "f"))], 2, "is a file, not a folder"),
    "out-under-a-file": (lambda t: [*T, "--out", str(file_at(t / "f") / "run")], 2, "Not a directory"),
    "out-dev-null": (lambda t: [*T, "--out", "/dev/null"], 2, "/dev/null is a file, not a folder"),
    "out-name-too-long": (lambda t: [*T, "--out", str(t / ("r" * 300))], 2, "is over 255 bytes"),
    "model-dim-huge": (lambda t: [*T, "model_args.dim=10000000"], 2, "over the limit of 65536"),
    "model-depth-huge": (lambda t: [*T, "model_args.depth=100000000"], 2, "over the limit of 65536"),
    "model-needs-more-memory": (
        lambda t: [*T, "model_args.dim=60000", "model_args.mlp_dim=60000"],
        2,
        "GiB of memory in all; make the model smaller",
    ),
    "idx-zero-train-images": (
        lambda t: [*T, "dataset=fashion-mnist", f"data_dir={idx_dir(t, train_images=0)}"],
        2,
        "holds 0 train images",
    ),
    "idx-label-out-of-range": (
        lambda t: [*T, "dataset=fashion-mnist", f"data_dir={idx_dir(t, train_label=197)}"],
        2,
        "train label 197 is outside its 10 classes",
    ),
    "idx-gzip-bomb": (
        lambda t: [*T, "dataset=fashion-mnist", f"data_dir={gzip_bomb_dir(t)}"],
        2,
        "holds more than 15696 bytes but its header promises 15696",
    ),
    "folder-symlink-loop": (
        lambda t: [*T, "dataset=folder", f"data_dir={folder_with_symlink_loop(t)}"],
        2,
        "(a symlink loop)",
    ),
    "out-on-an-unfinished-run": (
        lambda t: [*T, "--out", run_with_checkpoint(t, None, {"epoch": 1, "step": 0})],
        2,
        "holds an unfinished run; continue it with `convinit train --resume",
    ),
    "resume-all-checkpoints-damaged": (
        lambda t: ["train", "--resume", run_with_damaged_checkpoints(t), "--no-progress"],
        2,
        "every checkpoint of",
    ),
    "resume-another-architectures-weights": (
        lambda t: [
            "train",
            "--resume",
            run_with_checkpoint(t, torch.nn.Linear(2, 2), {"epoch": 1}),
            "--no-progress",
        ],
        2,
        "holds another model's weights",
    ),
    "resume-malformed-train-state": (
        lambda t: ["train", "--resume", run_with_checkpoint(t, None, {"epoch": 1}), "--no-progress"],
        2,
        "train_state.pt cannot be resumed from (KeyError: 'optimizer')",
    ),
    "resume-empty-config": (
        lambda t: ["train", "--resume", run_with_config(t, ""), "--no-progress"],
        2,
        "config.yaml is empty: it is damaged",
    ),
    "eval-cut-config": (
        lambda t: ["eval", run_with_config(t, "model: simplevit\nmodel_args: {}\n")],
        2,
        "lacks dataset, epochs, batch_size, lr, seed: it is damaged",
    ),
    "every-step-skipped": (
        lambda t: [*T, "epochs=2", "lr=1e6", "on_nonfinite=skip", "max_nonfinite_skips=1000000"],
        3,
        "was non-finite and skipped",
    ),
    "reproduce-seeds-abc": (lambda t: ["reproduce", "paper1_table3", "--seeds", "abc"], 2, "--seeds 'abc'"),
    "experiment-rows-not-mappings": (
        lambda t: ["reproduce", experiment(t, "scales: {small: {preset: default}}\nrows: [1, 2]\n")],
        2,
        "row 1 (1) must be a mapping with a label",
    ),
    "experiment-python-tag": (
        lambda t: ["reproduce", experiment(t, "scales: !!python/object/apply:os.system [id]\nrows: []\n")],
        2,
        "is not valid YAML",
    ),
    "efficiency-method-bad": (lambda t: ["efficiency", "--method", "bad"], 2, "is not LABEL=PRESET"),
    "efficiency-method-twice": (
        lambda t: ["efficiency", "--method", "a=default", "--method", "a=default lr=0.01"],
        2,
        "label 'a' is given twice",
    ),
    "efficiency-fractions-abc": (
        lambda t: ["efficiency", "--method", "a=default", "--fractions", "abc"],
        2,
        "--fractions 'abc' must be numbers",
    ),
    "bench-out-folder": (lambda t: ["bench", "--out", str(t)], 2, "is a folder; name the JSON file"),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_each_reproduction_ends_in_one_line_and_a_nonzero_exit(tmp_path, capsys, monkeypatch, row):
    argv, code, part = ROWS[row]
    monkeypatch.chdir(tmp_path)  # a default runs/ folder lands in the temporary folder
    args = argv(tmp_path)
    if "--out" not in args and args[0] == "train" and "--resume" not in args:
        args += ["--out", str(tmp_path / "run")]
    assert main(args) == code
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and err.count("\n") == 1, err
    assert part in err, err
    if code == 2:
        assert not list(tmp_path.rglob("metrics.jsonl")), "a training step ran before the refusal"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_folder_is_refused_in_one_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert main([*T, "--out", str(locked / "run")]) == 2
    assert "cannot write to run directory" in capsys.readouterr().err


def test_a_file_size_limit_hit_while_checkpointing_ends_in_one_line(tmp_path):
    # `ulimit -f`: safetensors fails with "File too large" in the first checkpoint write
    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))

    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "convinit", *T, "--out", str(run_dir)]
    result = subprocess.run(command, capture_output=True, text=True, preexec_fn=limit_file_size, timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"convinit: error: cannot write checkpoint {run_dir}/checkpoints/epoch-0001"
    )
    assert not list((run_dir / "checkpoints").iterdir()), "the half-written checkpoint was removed"
