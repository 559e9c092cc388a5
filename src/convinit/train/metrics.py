"""Per-epoch metrics in the run directory: `metrics.jsonl` (one JSON object per line) and `metrics.csv`."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any


class MetricsLog:
    """Append-only metrics; on resume, rows after the checkpointed epoch are dropped."""

    def __init__(self, run_dir: Path):
        self.jsonl = run_dir / "metrics.jsonl"
        self.csv = run_dir / "metrics.csv"

    def rows(self) -> list[dict[str, Any]]:
        if not self.jsonl.exists():
            return []
        rows = []
        for line in self.jsonl.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a kill
                break
        return rows

    def truncate_after(self, epoch: int) -> None:
        kept = [row for row in self.rows() if row.get("epoch", 0) <= epoch]
        self.jsonl.write_text("".join(json.dumps(row) + "\n" for row in kept))
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
        with open(self.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
