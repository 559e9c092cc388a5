"""Per-epoch metrics in the run directory: `metrics.jsonl` (one JSON object per line) and `metrics.csv`.

Rows are appended to `metrics.jsonl` (a kill mid-append leaves at most one cut line at the end); every
rewrite (the resume-time truncation, `metrics.csv`) is atomic, so a kill never empties either file.
Reading keeps every intact row around a garbled line and says which lines it skipped.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from pathlib import Path
from typing import Any

from convinit.runs.atomic import atomic_write_text


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The intact rows of a metrics.jsonl file; a warning names each garbled line that was skipped."""
    if not path.exists():
        return []
    rows, garbled = [], []
    for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("epoch"), int):
            rows.append(row)
        else:
            garbled.append(number)
    if garbled:
        lines = ", ".join(str(n) for n in garbled)
        warnings.warn(
            f"{path}: line(s) {lines} are damaged and were skipped; kept the {len(rows)} intact rows",
            stacklevel=2,
        )
    return rows


class MetricsLog:
    """Append-only metrics; on resume, rows after the checkpointed epoch are dropped."""

    def __init__(self, run_dir: Path):
        self.jsonl = run_dir / "metrics.jsonl"
        self.csv = run_dir / "metrics.csv"

    def rows(self) -> list[dict[str, Any]]:
        return read_metrics(self.jsonl)

    def truncate_after(self, epoch: int) -> None:
        kept = [row for row in self.rows() if row.get("epoch", 0) <= epoch]
        atomic_write_text(self.jsonl, "".join(json.dumps(row) + "\n" for row in kept))
        self.write_csv(kept)

    def append(self, row: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(clean) + "\n")
        self.write_csv(self.rows())

    def write_csv(self, rows: list[dict[str, Any]]) -> None:
        columns: list[str] = []
        for row in rows:
            columns += [k for k in row if k not in columns]
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.csv, text.getvalue())
