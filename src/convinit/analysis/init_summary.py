"""The initialisation at step 0, as reports show it: real-pass figures from each run's init_report.json.

A run's `init_report.json` holds, when the trainer fitted and measured the init on real training
images, `real_pass`: attention mass on the target offset (impulse), argmax agreement, normalised row
entropy and mean attention distance, all on real forward passes at the model's own alpha. The
pseudo-input figures (`mean_mass` on P or LN(P) alone) are not shown here: they say nothing about
what the layers do with images. Attention the init schemes do not reach (ConViT's gated positional
self-attention, whose point is its local init) is measured from the model itself (`recorded_pass`).
"""

from __future__ import annotations

import json
import math
import statistics
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from convinit.analysis.gates import gate_values
from convinit.analysis.locality import model_grid
from convinit.init.measure import map_statistics
from convinit.models.layers import record_attention
from convinit.system.read_back import read_capped, short_repr


def init_name(report: dict[str, Any]) -> str:
    """The scheme and its variant or solver, if any: 'mimetic (paper1)', 'impulse (closed_form)'."""
    detail = report.get("variant") or report.get("solver")
    return f"{report.get('scheme', '?')} ({detail})" if detail else str(report.get("scheme", "?"))


FIGURES = ("mean_mass", "mean_argmax_agreement", "mean_entropy", "mean_distance")  # averaged per row


def read_init_report(run_dir: Path) -> dict[str, Any] | None:
    """A run's init_report.json; None without one, or (with a one-line warning) when it is damaged."""
    path = Path(run_dir) / "init_report.json"
    if not path.exists():
        return None
    try:
        report = json.loads(read_capped(path))
        problem = init_report_problem(report)
    except (OSError, ValueError, RecursionError) as exc:  # ConfigError: not a regular file, too large
        problem = " ".join(str(exc).split())[:160]
    if problem is None:
        return report
    warnings.warn(
        f"{path} is damaged ({problem}); its run is left out of the initialisation table", stacklevel=2
    )
    return None


def init_report_problem(report: Any) -> str | None:
    """The first field the initialisation table reads that is not of its type, in words."""
    if not isinstance(report, dict):
        return "not a JSON object"
    for name in ("real_pass", "real_pass_held_out"):
        part = report.get(name, {})
        if not isinstance(part, dict):
            return f"field {name!r} must be an object, got {short_repr(part)}"
        for key in FIGURES:
            value = part.get(key)
            if value is not None and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            ):
                return f"field {name}.{key} must be a number, got {short_repr(value)}"
    return None


def init_rows(groups: Iterable[tuple[str, list[Path]]]) -> list[dict[str, Any]]:
    """One row per (label, run dirs): the init's name and its real-pass figures, averaged over runs."""
    rows = []
    for label, run_dirs in groups:
        reports = [r for r in (read_init_report(d) for d in run_dirs) if r is not None]
        if not reports:
            continue
        # impulse fits hold a quarter of the init images apart: its figures there, else the fitted ones
        real = [r.get("real_pass_held_out", r["real_pass"]) for r in reports if "real_pass" in r]

        def mean(key: str, real=real) -> float | None:
            values = [r[key] for r in real if r.get(key) is not None]
            return statistics.fmean(values) if values else None

        rows.append(
            {
                "method": label,
                "init": init_name(reports[0]),
                "qk_input": real[0].get("qk_input") if real else none_left(reports[0]),
                "target_mass": mean("mean_mass"),
                "argmax_agreement": mean("mean_argmax_agreement"),
                "entropy": mean("mean_entropy"),
                "distance": mean("mean_distance"),
                "warnings": sum("warning" in r for r in real),
            }
        )
    return rows


def none_left(report: dict[str, Any]) -> str | None:
    """The Q/K input cell of a run whose init found no attention layer to fit or measure (a ViT that is
    GPSA in every block: `no_attention_left` in its report), so that its empty figures say why."""
    return "none: no attention layer left" if report.get("no_attention_left") else None


@torch.no_grad()
def recorded_pass(model: nn.Module, images: torch.Tensor) -> dict[str, float] | None:
    """Mean row entropy / log(tokens) and attention distance (patches) of the maps every attention layer
    computes on `images` (B, C, H, W), as `record_attention` records them (GPSA: the gate's mix of
    positional and content attention); None for a model without attention layers."""
    model.eval()
    with record_attention(model) as maps:
        model(images)
    if not maps:
        return None
    stats = []
    for layer in maps.values():  # (B, H, T, T)
        grid = model_grid(model, layer.shape[-1])
        stats.append(map_statistics(layer.double().cpu(), None, grid))
    return {
        key: statistics.fmean(value for layer in stats for value in layer[key])
        for key in ("entropy", "distance")
    }


def positional_row(label: str, model: nn.Module, images: torch.Tensor) -> dict[str, Any] | None:
    """The init table's row of a model with gated positional attention (ConViT) at step 0, measured on
    `images`; None for other models."""
    gates = gate_values(model)
    measured = recorded_pass(model, images) if gates else None
    if measured is None:
        return None
    mean_gate = statistics.fmean(float(g) for layer in gates.values() for g in layer)
    return {
        "method": label,
        "init": f"GPSA positional (gate {mean_gate:.2f})",
        "qk_input": "position + content",
        "target_mass": None,
        "argmax_agreement": None,
        **measured,
        "warnings": 0,
    }


def init_markdown(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of `init_rows`, or '' when no run measured its init on real images."""
    if not any(row["entropy"] is not None for row in rows):
        return ""

    def cell(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [
        "| method | init | Q/K input | target mass | argmax agreement | entropy | distance (patches) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['method']} | {row['init']} | {row['qk_input'] or '-'} | {cell(row['target_mass'])} | "
            f"{cell(row['argmax_agreement'])} | {cell(row['entropy'])} | {cell(row['distance'])} |"
        )
    note = (
        "Attention at step 0 on real forward passes of the run's init images (training images, no "
        "augmentation; for impulse the quarter held apart from the fit), at the model's own alpha: mass on "
        "each head's target offset and argmax agreement (impulse only), row entropy / log(tokens), mean "
        "attention distance. GPSA rows: every layer's maps "
        "as computed, in its GPSA layers the gate's mix of positional attention (its local init) and content "
        "attention."
    )
    if any(row["warnings"] for row in rows):
        note += " Some runs warned: their maps put under 0.2 of their mass on the target (init_report.json)."
    return "\n".join(["## Initialisation at step 0", "", *lines, "", note])
