"""Attention maps of a run's model at initialisation and after training, for reports and `convinit analyze`.

The model at initialisation is rebuilt exactly as the trainer built it: same seed, same data, the same
init scheme fitted on the same training images (`DataSource.init_batch`), so no extra checkpoint is needed;
the trained one comes from the newest checkpoint. The maps are drawn on a real test image.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.experiments.grid import slug
from convinit.runs.checkpoint import latest_checkpoint, load_weights
from convinit.runs.run_dir import CONFIG_FILE
from convinit.train.opening import OpenedRun, open_run


def has_attention(model: nn.Module) -> bool:
    """convinit's attention layers, or a timm / transformers ViT's (read from its Q/K inputs)."""
    from convinit.analysis.locality import has_attention_layers

    return has_attention_layers(model)


def model_at_init(run_dir: Path) -> OpenedRun:
    """The run's model at step 0, reopened in the builder's order (seed, data, model, init), on the CPU,
    in eval mode: the run as every tool reopens one (`open_run`), with its init images and report."""
    run = open_run(run_dir, at="init")
    run.model.eval()
    return run


def first_test_image(run: OpenedRun) -> torch.Tensor:
    """(1, C, H, W): the run's first test image, normalised as the model's input, to look through it."""
    return run.data.test_batch(1, torch.device("cpu"))


def describe(run: OpenedRun) -> str:
    """'convit_tiny, GPSA local init, digits': the model, its init as a user would name it, the data."""
    from convinit.analysis.gates import gate_values

    init = f"init {run.cfg.init}"
    if gate_values(run.model):  # ConViT: its point is the GPSA layers' init, not the scheme of the rest
        init = "GPSA local init" if run.cfg.model_args.get("use_local_init", True) else "GPSA random init"
    return f"{run.cfg.model}, {init}, {run.cfg.dataset}"


def attention_figures(
    run_dir: str | Path, out: str | Path, label: str, layers: list[int] | None = None
) -> list[Path]:
    """PNGs of the attention maps of one test image (centre query) at init and after training; [] if the
    model has no attention layers. The trained figure needs a checkpoint (skipped without one)."""
    return draw_attention(model_at_init(Path(run_dir)), Path(run_dir), Path(out), label, layers)


def draw_attention(
    run: OpenedRun,
    run_dir: Path,
    out: Path,
    label: str,
    layers: list[int] | None = None,
    stem: str | None = None,
) -> list[Path]:
    """The figures of `attention_figures` for a rebuilt run, as out/<stem>-init.png and -trained.png
    (stem: the label's slug); `label` heads each figure."""
    from convinit.analysis.init_quality import report_offsets
    from convinit.analysis.plots import plot_attention_maps

    if not has_attention(run.model):
        return []
    title = f"{label} ({describe(run)})"
    stem = stem or slug(label)
    init = out / f"{stem}-init.png"
    offsets = report_offsets(run.init_report)  # impulse: each head's target, marked on its panel
    image = first_test_image(run)
    paths = [
        plot_attention_maps(run.model, image, init, layers=layers, title=f"{title}, step 0", offsets=offsets)
    ]
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None:
        load_weights(run.model, checkpoint)
        trained = out / f"{stem}-trained.png"
        paths.append(
            plot_attention_maps(
                run.model,
                image,
                trained,
                layers=layers,
                title=f"{title}, checkpoint {checkpoint.name}",
                offsets=offsets,
            )
        )
    return paths


def analyze_run(run_dir: str | Path) -> list[str]:
    """Every figure the run allows, written into run_dir/analysis/; one line per figure, written or not
    (and why not), so that a run with nothing to show says so."""
    from convinit.analysis.gates import gate_values
    from convinit.analysis.plots import render_run_analysis

    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(
            f"{run_dir} is not a run directory (no config.yaml); pass the folder `convinit train` wrote"
        )
    run = model_at_init(run_dir)
    lines = [f"{run_dir}: {describe(run)}"]
    written = render_run_analysis(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    names = {path.name: path for path in written}
    gated = bool(gate_values(run.model))
    for name, what, tracker in (
        ("nonlocality.png", "non-locality over training", "nonlocality"),
        ("gates.png", "GPSA gates over training", "gates"),
    ):
        if name in names:
            lines.append(f"  {what}: {names[name]}")
        elif tracker == "gates" and not gated:
            lines.append(f"  {what}: none ({run.cfg.model} has no gated positional attention)")
        elif has_attention(run.model):
            lines.append(f"  {what}: not recorded (train with track={tracker} to record it)")
    figures = draw_attention(run, run_dir, run_dir / "analysis", run_dir.resolve().name, stem="attention")
    if not figures:
        lines.append(f"  attention maps: none ({run.cfg.model} has no attention layers)")
    for path in figures:
        moment = "at initialisation" if path.stem.endswith("-init") else "after training"
        lines.append(f"  attention maps {moment}: {path}")
    if len(figures) == 1:
        lines.append("  attention maps after training: none (the run has no checkpoint yet)")
    return lines
