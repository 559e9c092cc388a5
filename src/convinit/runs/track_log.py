"""Trackers between evaluations: `track_every` steps, into `track.jsonl` and the experiment loggers.

Evaluations (step 0, every `eval_every` epochs, the end) carry the trackers' figures in `metrics.jsonl`;
a tracker that follows something through training (`init_quality`: does the convolutional bias last?)
also wants points between them. Each row is `{"epoch": completed epochs, "step": global step, ...}`;
on resume the rows after the checkpoint's step are dropped, so a continued run writes each step once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from convinit.runs.metrics import read_metrics
from convinit.system.atomic import append_text, atomic_write_text

TRACK_FILE = "track.jsonl"
TRACK_ROW_KEYS = ("epoch", "step")  # every row holds both (`read_metrics` skips one that does not)


class TrackLog:
    """Append-only tracker rows keyed by global step."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / TRACK_FILE

    def rows(self) -> list[dict[str, Any]]:
        return read_metrics(self.path, TRACK_ROW_KEYS)

    def truncate_after(self, step: int) -> None:
        if self.path.exists():
            kept = [row for row in self.rows() if row["step"] <= step]
            atomic_write_text(self.path, "".join(json.dumps(row) + "\n" for row in kept))

    def append(self, row: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        append_text(self.path, json.dumps(clean) + "\n")  # never through a link


def track_due(track: list[str], track_every: int, step: int) -> bool:
    """Whether the trackers run after global step `step` (1-based) of training."""
    return bool(track) and track_every > 0 and step % track_every == 0
