"""Figures of the ConViT paper for our runs: non-locality and gates over training, attention maps.

- `plot_nonlocality`: non-locality of each layer vs epoch, one panel per run (ConViT beside DeiT,
  paper Fig. 5), from the `nonlocality/L{l}` keys of `metrics.jsonl`.
- `plot_gates`: sigmoid(lambda) of each head vs epoch, one panel per GPSA layer, head mean in black
  (paper Fig. 6), from the `gate/L{l}/H{h}` keys.
- `plot_attention_maps`: where one query patch looks, for each head of every layer (of the first,
  middle and last beyond six layers, or chosen ones; the figure says which rule), on a log colour scale
  with each head's gate printed (paper Fig. 7), from a model and an image; given the heads' target
  offsets, each panel says its weight on the target and marks a peak that misses it.
- `render_run_analysis(run_dir, model=None)`: all of the above that the run allows, into run_dir/analysis/.

Figures are drawn with matplotlib's object API (`Figure` + Agg), so nothing touches pyplot's global
state or the user's backend.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from convinit.analysis.gates import gate_values
from convinit.analysis.locality import attention_maps, model_grid, patch_attention
from convinit.errors import ConfigError
from convinit.runs.metrics import read_metrics as run_metrics
from convinit.system.atomic import atomic_writer, make_folder

Records = Sequence[Mapping[str, Any]]
ALL_LAYERS_UP_TO = 6  # attention maps show every layer up to this depth, beyond it first, middle and last
NONLOCALITY_KEY = re.compile(r"^nonlocality/L(\d+)$")
GATE_KEY = re.compile(r"^gate/L(\d+)/H(\d+)$")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The intact records of a metrics.jsonl file (`convinit.runs.metrics.read_metrics`: a damaged or
    mistyped line is skipped with a warning naming it, so every value plotted is a number)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no metrics file at {path}; pass a run directory that holds metrics.jsonl")
    return run_metrics(path)


def series(records: Records, key: str) -> tuple[list[float], list[float]]:
    """(epochs, values) of `key` over the records that have both it and an epoch."""
    pairs = [(r["epoch"], r[key]) for r in records if key in r and "epoch" in r and r[key] is not None]
    return [float(e) for e, _ in pairs], [float(v) for _, v in pairs]


def _as_records(run: str | Path | Records) -> Records:
    if isinstance(run, (str, Path)):
        path = Path(run)
        return read_metrics(path / "metrics.jsonl" if path.is_dir() else path)
    return run


def nonlocality_layers(records: Records) -> list[int]:
    return sorted({int(m.group(1)) for r in records for k in r if (m := NONLOCALITY_KEY.match(k))})


def gate_heads(records: Records) -> dict[int, list[int]]:
    """{layer: [heads]} of the gate keys present in the records."""
    found: dict[int, set[int]] = {}
    for record in records:
        for key in record:
            if m := GATE_KEY.match(key):
                found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return {layer: sorted(heads) for layer, heads in sorted(found.items())}


def plot_nonlocality(runs: Mapping[str, str | Path | Records], path: str | Path) -> Path:
    """Non-locality per layer vs epoch, one panel per run (e.g. {"ConViT": dir1, "DeiT": dir2}).

    Panels share the y axis. A run is a run directory, a metrics.jsonl path or a list of records.
    """
    runs = {label: _as_records(run) for label, run in runs.items()}
    fig = Figure(figsize=(4.5 * len(runs), 3.6), layout="constrained")
    axes = fig.subplots(1, len(runs), sharey=True, squeeze=False)[0]
    for ax, (label, records) in zip(axes, runs.items(), strict=True):
        layers = nonlocality_layers(records)
        colours = _layer_colours(len(layers))
        for colour, layer in zip(colours, layers, strict=True):
            ax.plot(*series(records, f"nonlocality/L{layer}"), color=colour, label=f"L{layer}")
        ax.set_title(label)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # tracked at whole epochs
        if layers:
            ax.legend(fontsize=6, ncol=2)
    axes[0].set_ylabel("non-locality (patches)")
    fig.suptitle("Mean attention distance per layer through training")
    return _save(fig, path)


def plot_gates(run: str | Path | Records, path: str | Path, title: str | None = None) -> Path:
    """sigmoid(lambda) of each head vs epoch, one panel per gated layer, with the head mean in black."""
    records = _as_records(run)
    layers = gate_heads(records)
    if not layers:
        raise ConfigError("the records hold no gate/L{l}/H{h} keys; train with track: [gates]")
    cols = min(len(layers), 5)
    rows = -(-len(layers) // cols)
    fig = Figure(figsize=(2.8 * cols, 2.4 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).flatten()
    for ax, (layer, heads) in zip(axes, layers.items(), strict=False):
        curves = [series(records, f"gate/L{layer}/H{head}") for head in heads]
        for head, (epochs, values) in zip(heads, curves, strict=True):
            ax.plot(epochs, values, linewidth=1, label=f"H{head}")
        epochs = curves[0][0]
        if all(len(c[1]) == len(epochs) for c in curves):
            mean = [sum(c[1][i] for c in curves) / len(curves) for i in range(len(epochs))]
            ax.plot(epochs, mean, color="black", linewidth=2, label="mean")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_ylim(0, 1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(layers) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=6)
    fig.supxlabel("epoch")
    fig.supylabel("gate sigmoid(lambda)")
    fig.suptitle(f"{title}: positional gates per head" if title else "Positional gates per head")
    return _save(fig, path)


def plot_attention_maps(
    model: nn.Module,
    images: torch.Tensor,
    path: str | Path,
    layers: Sequence[int] | None = None,
    query: tuple[int, int] | None = None,
    title: str | None = None,
    offsets: Sequence[Sequence[tuple[int, int]]] | None = None,
) -> Path:
    """`attention_maps_figure` saved as a PNG at `path`."""
    return _save(attention_maps_figure(model, images, layers, query, title, offsets), path)


def mark_target(ax, attn: torch.Tensor, query: tuple[int, int], layer: int, head: int, offsets) -> str:
    """Outline the head's target patch (query + its offset) on its panel, put a red x on the peak when
    the peak is elsewhere, and return the title line saying so ('' without an offset): a convolution tap
    puts its weight on the target at every query, and an average over queries can hide where it does not."""
    if offsets is None or layer >= len(offsets) or head >= len(offsets[layer]):
        return ""
    offset, (rows, cols) = offsets[layer][head], attn.shape
    target = (query[0] + offset[0], query[1] + offset[1])
    if not (0 <= target[0] < rows and 0 <= target[1] < cols):
        return f"\ntarget {tuple(offset)} off the grid here"
    ax.add_patch(Rectangle((target[1] - 0.5, target[0] - 0.5), 1, 1, fill=False, edgecolor="white",
                           linestyle="--", linewidth=1.2))  # fmt: skip
    peak = divmod(int(attn.argmax()), cols)
    line = f"\ntarget {tuple(offset)}: {float(attn[target]):.2f}"
    if peak != target:
        ax.plot(peak[1], peak[0], marker="x", color="red", markersize=9, markeredgewidth=2)
        line += ", peak off (x)"
    return line


def figure_pixels(fig: Figure) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a figure, rendered with Agg (for TensorBoard and W&B images)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


@torch.no_grad()
def attention_maps_figure(
    model: nn.Module,
    images: torch.Tensor,
    layers: Sequence[int] | None = None,
    query: tuple[int, int] | None = None,
    title: str | None = None,
    offsets: Sequence[Sequence[tuple[int, int]]] | None = None,
) -> Figure:
    """Attention of one query patch (row, col; default the centre) over the patch grid, per head.

    One row per chosen layer (index as in `attention_layers`; default `default_layers`), one column per
    head, log colour scale with its colour bar, the query outlined in red and each GPSA head's gate in its
    title; `title` (the model, the moment) heads the figure, above which layers are shown and why. Uses
    the first image of `images` (already normalised, shape (B, C, H, W)). For layers with a class token,
    the patch-to-patch attention is shown, renormalised over patches (see locality). `offsets` (per
    layer, per head (dy, dx), e.g. an impulse init report's): each panel's weight on its target and a
    peak off target (`mark_target`).
    """
    maps = attention_maps(model, images[:1])  # convinit's recorded maps, or a timm / transformers ViT's
    names = list(maps)
    if not names:
        raise ConfigError("the model has no attention layers to plot")
    layers, rule = shown_layers(len(names), layers)
    gates = gate_values(model)
    first = maps[names[layers[0]]]
    rows, cols = model_grid(model, first.shape[-1])
    row, col = query if query is not None else (rows // 2, cols // 2)
    if not (0 <= row < rows and 0 <= col < cols):
        raise ConfigError(f"query patch {(row, col)} is outside the {rows}x{cols} patch grid")
    heads = max(maps[names[layer]].shape[1] for layer in layers)
    where = (
        f"attention weight (log colour scale) of the query patch (row {row}, col {col}, red square) over the "
        f"{rows}x{cols} patches"
    )
    which = f"layers {', '.join(map(str, layers))} of 0-{len(names) - 1} ({rule})"
    heading = fitted_lines(
        [title, f"{where}; {which}"] if title else [f"{where}; {which}"], panel_width(heads), SUPTITLE_SIZE
    )
    fig, axes, colour_axes = panel_grid(heads, len(layers), heading.count("\n") + 1)
    for ax_row, colour_ax, layer in zip(axes, colour_axes, layers, strict=True):
        attn = patch_attention(maps[names[layer]].float(), rows * cols)[0]  # (H, N, N)
        attn = attn[:, row * cols + col].reshape(-1, rows, cols).cpu()  # (H, rows, cols)
        norm = LogNorm(vmin=max(float(attn.min()), 1e-6), vmax=max(float(attn.max()), 2e-6))
        for head, ax in enumerate(ax_row):
            ax.set_xticks([]), ax.set_yticks([])
            if head >= attn.shape[0]:
                ax.set_visible(False)
                continue
            image = ax.imshow(attn[head].clamp_min(1e-6).numpy(), cmap="viridis", norm=norm)
            ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
            label = f"layer {layer}, head {head}"
            if layer in gates:
                label += f"\ngate {float(gates[layer][head]):.2f} (positional)"
            ax.set_title(label + mark_target(ax, attn[head], (row, col), layer, head, offsets), fontsize=8)
        fig.colorbar(image, cax=colour_ax)
    fig.suptitle(heading, fontsize=SUPTITLE_SIZE, y=1 - 0.08 / fig.get_figheight(), va="top")
    return fig


SUPTITLE_SIZE = 9  # points
PANEL_INCHES = 2.2  # one head's map with its (up to three-line) title


def panel_width(heads: int) -> float:
    """Inches of an attention figure: a panel per head and, at the right, the colour bar's ticks."""
    return PANEL_INCHES * heads + 1.2


def panel_grid(heads: int, layers: int, heading_lines: int) -> tuple[Figure, np.ndarray, list]:
    """A figure of `layers` x `heads` map panels, one colour-bar axis at the end of each row, and room above
    for a heading of `heading_lines`, all placed in inches: matplotlib's constrained layout found the same
    places by solving for them at every save, a second or more per figure (half of `convinit demo
    --quick`'s figure time)."""
    heading = 0.2 + heading_lines * SUPTITLE_SIZE * 1.25 / 72  # inches
    width, height = panel_width(heads), PANEL_INCHES * layers + heading
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(
        layers, heads + 1, width_ratios=[1.0] * heads + [0.07],
        left=0.15 / width, right=1 - 0.95 / width, bottom=0.1 / height, top=1 - (heading + 0.45) / height,
        wspace=0.12, hspace=0.55,
    )  # fmt: skip
    cells = grid.subplots(squeeze=False)  # (layers, heads + 1)
    return fig, cells[:, :heads], list(cells[:, heads])


WIDEST_CHARACTER = 0.62  # of the font size: DejaVu Sans's average width over letters, digits and punctuation


def fitted_lines(lines: Sequence[str], width_inches: float, size: float) -> str:
    """`lines` wrapped at spaces to the figure's width, so that a centred title is never cut at either
    edge (three heads make a 7.4-inch figure, narrower than the title and the rule of a 12-layer model)."""
    characters = max(20, int(width_inches * 72 / (size * WIDEST_CHARACTER)))
    return "\n".join(textwrap.fill(line, characters, break_long_words=False) for line in lines)


def shown_layers(count: int, layers: Sequence[int] | None) -> tuple[list[int], str]:
    """The layers a figure of a model with `count` attention layers shows, and the rule in words."""
    if layers is None:
        return default_layers(count)
    bad = [layer for layer in layers if not 0 <= layer < count]
    if bad:
        raise ConfigError(f"layers {bad} out of range; the model has attention layers 0..{count - 1}")
    return list(layers), "chosen"


def default_layers(count: int) -> tuple[list[int], str]:
    """The layers a figure shows unasked, and the rule in words: every one up to `ALL_LAYERS_UP_TO`
    (the demo's depth-4 ViTs show all four), beyond that the first, middle and last (a ViT-Ti has 12,
    and twelve rows of heads would not read)."""
    if count <= ALL_LAYERS_UP_TO:
        return list(range(count)), "all"
    return sorted({0, count // 2, count - 1}), "first, middle and last"


def render_run_analysis(
    run_dir: str | Path,
    model: nn.Module | None = None,
    images: torch.Tensor | None = None,
    compare: Mapping[str, str | Path | Records] | None = None,
) -> list[Path]:
    """Render every figure a run allows into run_dir/analysis/ and return the written paths.

    From run_dir/metrics.jsonl: nonlocality.png (beside the `compare` runs, e.g. {"DeiT": deit_dir})
    and gates.png, when their keys are there. With `model`: attention_maps.png on `images` (default:
    one fixed standard-normal image of the model's input size; pass a real normalised image for
    content attention that means something).
    """
    run_dir = Path(run_dir)
    out = run_dir / "analysis"
    metrics = run_dir / "metrics.jsonl"
    if model is None and not metrics.is_file():
        raise ConfigError(f"no metrics.jsonl in {run_dir}; pass a run directory (or a model to plot)")
    make_folder(out, inside=run_dir)  # a received run folder's `analysis` link is never written through
    written = []
    if metrics.is_file():
        records = read_metrics(metrics)
        if nonlocality_layers(records):
            runs = {run_dir.name or "run": records, **(compare or {})}
            written.append(plot_nonlocality(runs, out / "nonlocality.png"))
        if gate_heads(records):
            written.append(plot_gates(records, out / "gates.png", title=run_dir.name))
    if model is not None:
        if images is None:
            images = default_image(model)
        written.append(plot_attention_maps(model, images, out / "attention_maps.png"))
    return written


def default_image(model: nn.Module) -> torch.Tensor:
    """One fixed N(0, 1) image of the model's input size (`img_size`, `in_chans`), on its device."""
    height, width = getattr(model, "img_size", (32, 32))
    channels = getattr(model, "in_chans", 3)
    generator = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    return torch.randn(1, channels, height, width, generator=generator).to(device)


def _layer_colours(count: int) -> list:
    cmap = colormaps["viridis"]
    return [cmap(i / max(count - 1, 1)) for i in range(count)]


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, "wb") as f:  # never through a link the folder may hold
        fig.savefig(f, format=path.suffix.lstrip(".") or None, dpi=110)
    return path
