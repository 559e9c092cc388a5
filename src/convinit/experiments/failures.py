"""A run that failed says why in its folder: `failed.json`, read by the report and by a grid's rerun.

Kept apart from the runner so that a SLURM job (`slurm_job`) records its failure the same way without
importing the runner that submits it.
"""

from __future__ import annotations

import json
from pathlib import Path

from convinit.system.atomic import atomic_write_text


def record_failure(run_dir: Path, reason: str) -> str:
    """Write `failed.json` (read by the report) and return the outcome line."""
    atomic_write_text(run_dir / "failed.json", json.dumps({"reason": reason}, indent=1))
    return f"failed: {reason}"
