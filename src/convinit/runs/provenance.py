"""Where a number came from: convinit version, git commit of the source, torch version, time."""

from __future__ import annotations

import platform
import subprocess
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from convinit.system.version import VERSION


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the convinit source tree, with '+dirty' for local changes; 'unknown' outside git."""
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance() -> dict[str, Any]:
    import torch

    return {
        "convinit_version": VERSION,
        "git_commit": git_commit(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
