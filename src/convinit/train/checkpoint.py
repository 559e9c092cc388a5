"""Checkpoints: model weights as safetensors, optimiser/scheduler/RNG state beside them.

Each checkpoint is a folder `checkpoints/epoch-NNNN[-step-MMMMM]` written under a temporary name and
renamed when complete, with `manifest.json` recording each file's size and SHA-256; loading verifies
them and falls back to the previous checkpoint (with a warning) if the newest is damaged. The last
`KEEP` checkpoints are kept. Training state is loaded with `torch.load(weights_only=True)`, so a
checkpoint can never run code.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors.torch import load_model, save_model

KEEP = 2
MANIFEST = "manifest.json"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def checkpoint_name(epoch: int, step: int) -> str:
    return f"epoch-{epoch:04d}" + (f"-step-{step:06d}" if step else "")


def save_checkpoint(
    run_dir: Path,
    model: nn.Module,
    train_state: dict[str, Any],
    epoch: int,
    step: int = 0,
    ema: nn.Module | None = None,
) -> Path:
    """Write one checkpoint atomically; `epoch` counts finished epochs, `step` the steps into the next one."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(epoch, step)
    tmp = root / (final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    if ema is not None:
        save_model(ema, str(tmp / "ema.safetensors"))
    torch.save(train_state, tmp / "train_state.pt")
    files = sorted(p for p in tmp.iterdir())
    for path in files:
        fsync_file(path)
    manifest = {
        "epoch": epoch,
        "step": step,
        "files": {p.name: {"size": p.stat().st_size, "sha256": sha256(p)} for p in files},
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    fsync_file(tmp / MANIFEST)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.endswith(".tmp"))


def verify_checkpoint(path: Path) -> str | None:
    """None if every file matches its manifest, else what is wrong."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        return "no manifest"
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return "unreadable manifest"
    for name, expected in manifest["files"].items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != expected["size"]:
            return f"{name} has {file.stat().st_size} bytes, expected {expected['size']}"
        if sha256(file) != expected["sha256"]:
            return f"{name} does not match its recorded hash"
    return None


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies; damaged newer ones are skipped with a warning."""
    for path in reversed(list_checkpoints(run_dir)):
        problem = verify_checkpoint(path)
        if problem is None:
            return path
        warnings.warn(f"checkpoint {path} is damaged ({problem}); using the previous one", stacklevel=2)
    return None


def load_weights(model: nn.Module, path: Path, ema: bool = False) -> None:
    """Load model (or EMA) weights from a checkpoint folder or a .safetensors file."""
    file = (
        path if path.suffix == ".safetensors" else path / ("ema.safetensors" if ema else "model.safetensors")
    )
    load_model(model, str(file))


def load_train_state(path: Path) -> dict[str, Any]:
    return torch.load(path / "train_state.pt", map_location="cpu", weights_only=True)
