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

from convinit.runs.ownership import check_still_owner
from convinit.system.atomic import append_text, atomic_write_text
from convinit.system.read_back import LOG_LIMIT, read_capped, short_repr


def read_metrics(path: Path, required: tuple[str, ...] = ("epoch",)) -> list[dict[str, Any]]:
    """The intact rows of a metrics.jsonl file; a warning names each damaged line that was skipped.

    A row is intact when it is a JSON object whose `required` keys are counts (0, 1, ...) and whose every
    value is a finite number or null (the writer stores NaN and inf as null): a hand-edited
    `"test_acc": "abc"` is skipped like a garbled line, never handed to a report's arithmetic. A file
    that is no regular file or is over `LOG_LIMIT` bytes is refused in one line (ConfigError).
    """
    if not path.exists():
        return []
    rows, damaged = [], {}
    text = read_capped(path, LOG_LIMIT).decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row, problem = parse_row(line, required)
        if problem is None:
            rows.append(row)
        else:
            damaged[number] = problem
    if damaged:
        lines = ", ".join(str(n) for n in damaged)
        first = next(iter(damaged))
        warnings.warn(
            f"{path}: line(s) {lines} are damaged and were skipped; kept the {len(rows)} intact rows "
            f"(line {first}: {damaged[first]})",
            stacklevel=2,
        )
    return rows


def parse_row(line: str, required: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """A metrics row and None, or what is wrong with the line."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return {}, "not JSON"
    if not isinstance(row, dict):
        return {}, "not a JSON object"
    for key in required:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return {}, f"{key!r} is {short_repr(value)}, not a count"
    for key, value in row.items():
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if value is not None and not finite:
            return {}, f"{short_repr(key)} is {short_repr(value)}, not a number"
    return row, None


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
        check_still_owner(self.jsonl.parent)
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        append_text(self.jsonl, json.dumps(clean) + "\n")  # never through a link
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


def loss_change_at_end(rows: list[dict[str, Any]]) -> tuple[float, int, float] | None:
    """(change, epochs, earlier loss): the last epoch's training loss minus that of the epoch a tenth of
    the run earlier (at least one), over how many epochs, and that earlier loss; near 0 where the run had
    plateaued, clearly negative where it was still learning. None without both epochs."""
    losses = {row["epoch"]: row["train_loss"] for row in rows if finite(row.get("train_loss"))}
    if not losses:
        return None
    last = max(losses)
    earlier = last - max(1, round(last / 10))
    if earlier not in losses:
        return None
    return losses[last] - losses[earlier], last - earlier, losses[earlier]


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
