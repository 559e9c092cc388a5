"""Checkpoints: model weights as safetensors, optimiser/scheduler/RNG state beside them.

Each checkpoint is a folder `checkpoints/epoch-NNNN[-step-MMMMMM]`, written in four steps so that a
process killed at any moment (SIGKILL, power loss after the fsyncs) leaves the previous checkpoint
usable:

1. `write_files`: every file goes into `<name>.tmp/`, each fsynced;
2. `write_manifest`: `manifest.json` records each file's size and SHA-256;
3. `publish`: one `os.replace` renames the folder to its final name (atomic on POSIX);
4. `prune`: all but the newest `KEEP` checkpoints, and stale `*.tmp` folders, are removed.

Nothing is written or deleted through a link: a `checkpoints` folder that is a link is refused in one
line before a write or a prune (it could name another run's checkpoints), and a link inside it is never
read as a checkpoint; a link in the place of a write's `.tmp` folder or final name is removed, not followed.

Only convinit's own checkpoints count: folders whose name matches `CHECKPOINT_NAME` exactly, ordered
by the epoch and step numbers in the name (never as strings: `epoch-10000` comes after `epoch-9999`).
Anything else in `checkpoints/` (a copy `keep-epoch-0003`, a folder `best_resnet`) is never read,
resumed from or pruned; prune also leaves alone a matching folder without a manifest. Deleting waits
for readers that hold `reading_checkpoints` (see `convinit.runs.ownership`).

Loading verifies the manifest and falls back to the previous checkpoint, with a warning that names
both, when the newest is damaged. `*.tmp` folders are never read. Training state is loaded with
`torch.load(weights_only=True)`, so a checkpoint can never run code: a file that needs more than
tensors and plain Python values is refused with a one-line ConfigError.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from convinit.errors import ConfigError
from convinit.runs.ownership import check_still_owner, removing_checkpoints
from convinit.system.atomic import fsync_dir, refuse_link

KEEP = 2
MANIFEST = "manifest.json"
REQUIRED = ("model.safetensors", "train_state.pt")  # a checkpoint is unusable without these


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


CHECKPOINT_NAME = re.compile(r"epoch-(\d{4,})(?:-step-(\d{6,}))?")
STALE_WRITE = re.compile(r"epoch-\d{4,}(?:-step-\d{6,})?\.tmp")


def checkpoint_position(path: Path) -> tuple[int, int] | None:
    """(epoch, step) of a folder named like one of ours, None for any other name."""
    found = CHECKPOINT_NAME.fullmatch(path.name)
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2) or 0)


def write_files(tmp: Path, model: nn.Module, train_state: dict[str, Any], ema: nn.Module | None) -> None:
    save_model(model, str(tmp / "model.safetensors"))
    if ema is not None:
        save_model(ema, str(tmp / "ema.safetensors"))
    torch.save(train_state, tmp / "train_state.pt")
    for path in tmp.iterdir():
        fsync_file(path)


def write_manifest(tmp: Path, epoch: int, step: int) -> None:
    files = sorted(tmp.iterdir())
    manifest = {
        "epoch": epoch,
        "step": step,
        "files": {p.name: {"size": p.stat().st_size, "sha256": sha256(p)} for p in files},
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    fsync_file(tmp / MANIFEST)


def remove_entry(path: Path) -> None:
    """Remove a folder, or a link in its place (the link itself: nothing it points to is touched)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def publish(tmp: Path, final: Path) -> None:
    if final.exists() or final.is_symlink():  # a damaged checkpoint of the same name, from a killed run
        with removing_checkpoints(final.parent.parent):
            remove_entry(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def prune(run_dir: Path, keep: int = KEEP) -> None:
    """Remove all but the newest `keep` of our checkpoints, and the `*.tmp` folders of killed writes;
    nothing whose name is not ours, and no folder without a manifest."""
    root = run_dir / "checkpoints"
    refuse_link(root)  # pruning through a link would delete another folder's checkpoints
    ours = list_checkpoints(run_dir)
    old = [p for p in ours[: max(len(ours) - keep, 0)] if (p / MANIFEST).is_file()]
    stale = (
        [p for p in root.iterdir() if STALE_WRITE.fullmatch(p.name) and (p.is_dir() or p.is_symlink())]
        if root.is_dir()
        else []
    )
    if not old and not stale:
        return
    with removing_checkpoints(run_dir):
        for path in old + stale:
            remove_entry(path)


def save_checkpoint(
    run_dir: Path,
    model: nn.Module,
    train_state: dict[str, Any],
    epoch: int,
    step: int = 0,
    ema: nn.Module | None = None,
) -> Path:
    """Write one checkpoint atomically; `epoch` counts finished epochs, `step` the steps into the next one."""
    check_still_owner(run_dir)
    root = run_dir / "checkpoints"
    refuse_link(root)  # a received run folder's `checkpoints -> elsewhere` is never written through
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(epoch, step)
    tmp = root / (final.name + ".tmp")
    remove_entry(tmp)
    tmp.mkdir()
    try:
        write_files(tmp, model, train_state, ema)
        write_manifest(tmp, epoch, step)
    except (OSError, RuntimeError, SafetensorError) as exc:  # torch.save: "unexpected pos" on a full disk
        shutil.rmtree(tmp, ignore_errors=True)
        detail = " ".join(str(exc).split())[:200]
        raise ConfigError(
            f"cannot write checkpoint {final} ({type(exc).__name__}: {detail}); the disk may be full or "
            f"the folder read-only: free space, then continue with `convinit train --resume {run_dir}`"
        ) from exc
    publish(tmp, final)
    prune(run_dir)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Our checkpoint folders, oldest first by (epoch, step); `*.tmp` folders, foreign names and links
    (which a received run folder may hold, pointing anywhere) are not."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    ours = [
        p for p in root.iterdir() if checkpoint_position(p) is not None and p.is_dir() and not p.is_symlink()
    ]
    return sorted(ours, key=checkpoint_position)


def verify_checkpoint(path: Path) -> str | None:
    """None if every file matches its manifest, else what is wrong."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        return "no manifest"
    try:
        manifest = json.loads(manifest_path.read_bytes())
        files = manifest["files"]
        expected_files = {name: (int(e["size"]), str(e["sha256"])) for name, e in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):  # cut short, garbage, or the wrong shape
        return "unreadable manifest"
    for name in REQUIRED:
        if name not in expected_files:
            return f"the manifest does not list {name}"
    recorded, named = (manifest.get("epoch"), manifest.get("step")), checkpoint_position(path)
    if named is not None and recorded != named:  # a copy renamed to look like another epoch
        return f"its manifest records epoch {recorded[0]} step {recorded[1]}, not what its name says"
    for name, (size, digest) in expected_files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, expected {size}"
        if sha256(file) != digest:
            return f"{name} does not match its recorded hash"
    return None


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies; each damaged newer one is skipped with a warning. None, with
    no warning, when none verifies: the caller's one line says so (`refuse_if_all_damaged` names each
    damaged one), rather than a warning per checkpoint before it that repeats the same."""
    damaged: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(run_dir)):
        problem = verify_checkpoint(path)
        if problem is None:
            for newer, why in damaged:
                warnings.warn(
                    f"checkpoint {newer} is damaged ({why}); using the previous one, {path.name}",
                    stacklevel=2,
                )
            return path
        damaged.append((path, problem))
    return None


def load_weights(model: nn.Module, path: Path, ema: bool = False) -> None:
    """Load model (or EMA) weights from a checkpoint folder or a .safetensors file."""
    file = (
        path if path.suffix == ".safetensors" else path / ("ema.safetensors" if ema else "model.safetensors")
    )
    try:
        load_model(model, str(file))
    except (SafetensorError, RuntimeError, OSError, ValueError) as exc:  # a pickle, another model's weights
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        raise ConfigError(
            f"cannot load {file} into this {type(model).__name__} ({type(exc).__name__}: {detail}); "
            "it is damaged or holds another model's weights"
        ) from exc


def load_train_state(path: Path) -> dict[str, Any]:
    """Optimiser, scheduler, RNG and position of a checkpoint folder; never runs code from the file.

    `weights_only=True` admits tensors and plain Python values only; anything else (a pickle that
    would import a function, e.g. a crafted file) raises a one-line ConfigError naming the file.
    """
    file = path / "train_state.pt"
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols before refusing
            warnings.simplefilter("ignore")
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's wording changes between versions: "Unsupported global: GLOBAL io.open" (<= 2.5),
        # "Trying to load unsupported GLOBAL posix.system whose module posix is blocked" (>= 2.6)
        found = re.search(r"(?i)unsupported(?: global:)? GLOBAL (\S+)", str(exc))
        what = f" ({found.group(1)})" if found else ""
        raise ConfigError(
            f"refusing to load {file}: it holds Python objects beyond tensors and plain values{what}, "
            f"which could run code; it was not written by convinit, delete {path} or use a trusted copy"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(
            f"cannot load {file} ({type(exc).__name__}: {detail}); "
            f"delete {path} to resume from the previous checkpoint"
        ) from exc
