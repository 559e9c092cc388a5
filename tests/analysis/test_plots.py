"""Analysis figures are written as PNG files from metrics.jsonl records and from models."""

from __future__ import annotations

import json

import pytest
import torch

from convinit.analysis.plots import (
    attention_maps_figure,
    default_layers,
    plot_attention_maps,
    plot_nonlocality,
    render_run_analysis,
)
from convinit.errors import ConfigError
from convinit.models import create_model

PNG = b"\x89PNG\r\n\x1a\n"


def small_convit():
    torch.manual_seed(0)
    return create_model(
        "convit_tiny_patch4_32", num_classes=3, img_size=(16, 24), patch_size=4, embed_dim=16, num_heads=4,
        depth=3, local_up_to_layer=2,
    )  # fmt: skip


def write_run(run_dir, layers=3, heads=4, epochs=4, gates=True):
    run_dir.mkdir()
    with open(run_dir / "metrics.jsonl", "w") as f:
        for epoch in range(epochs):
            record = {"epoch": epoch, "train_loss": 1.0 / (epoch + 1)}
            for layer in range(layers):
                record[f"nonlocality/L{layer}"] = 1.0 + 0.1 * epoch * layer
                for head in range(heads):
                    record[f"nonlocality/L{layer}/H{head}"] = 1.0 + 0.1 * head
                    if gates and layer < layers - 1:
                        record[f"gate/L{layer}/H{head}"] = 0.73 - 0.1 * epoch * head / epochs
            f.write(json.dumps(record) + "\n")
        f.write(json.dumps({"epoch": epochs, "test_acc": 0.5}) + "\n")  # a record without tracker keys
    return run_dir


def is_png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG


def test_render_run_analysis_writes_all_figures(tmp_path):
    run = write_run(tmp_path / "convit")
    written = render_run_analysis(run, model=small_convit())
    assert {p.name for p in written} == {"nonlocality.png", "gates.png", "attention_maps.png"}
    assert all(p.parent == run / "analysis" and is_png(p) for p in written)


def test_render_run_analysis_without_gates_or_model(tmp_path):
    run = write_run(tmp_path / "deit", gates=False)
    written = render_run_analysis(run)
    assert [p.name for p in written] == ["nonlocality.png"] and is_png(written[0])


def test_nonlocality_convit_beside_deit(tmp_path):
    convit, deit = write_run(tmp_path / "convit"), write_run(tmp_path / "deit", gates=False)
    path = plot_nonlocality({"ConViT": convit, "DeiT": deit}, tmp_path / "compare.png")
    assert is_png(path)


def test_attention_maps_for_chosen_layers_and_query(tmp_path):
    model = small_convit()
    images = torch.randn(2, 3, 16, 24)
    assert is_png(plot_attention_maps(model, images, tmp_path / "maps.png", layers=[0, 2], query=(0, 5)))
    with pytest.raises(ConfigError, match="outside"):
        plot_attention_maps(model, torch.randn(1, 3, 16, 24), tmp_path / "bad.png", query=(4, 0))


def test_each_head_panel_says_its_target_weight_and_marks_a_peak_off_target():
    from convinit.analysis.plots import attention_maps_figure
    from convinit.init import initialize

    torch.manual_seed(0)
    model = create_model("simplevit", num_classes=3, img_size=6, in_chans=1, patch_size=1, dim=32, depth=1,
                         heads=2, dim_head=16, mlp_dim=8, qk_input="blend", alpha=0.0)  # fmt: skip
    initialize(model, "impulse", offsets="centre_first", kernel_size=3, seed=0)  # (0, 0), then (-1, 0)
    offsets = [[(0, 0), (0, 1)]]  # head 1 is drawn against a target it was not fitted to
    fig = attention_maps_figure(model, torch.randn(1, 1, 6, 6), query=(3, 3), offsets=offsets)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("layer 0, head 0\ntarget (0, 0): 0.") and "peak off" not in titles[0]
    assert "target (0, 1): 0.0" in titles[1] and titles[1].endswith("peak off (x)")
    assert len(fig.axes[1].lines) == 1  # the red x on head 1's peak
    edge = attention_maps_figure(model, torch.randn(1, 1, 6, 6), query=(0, 5), offsets=[[(-1, 0), (0, 1)]])
    assert "off the grid here" in edge.axes[0].get_title()


def test_missing_metrics_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="metrics.jsonl"):
        render_run_analysis(tmp_path)


def test_a_metrics_row_of_wrong_types_is_skipped_not_plotted(tmp_path):
    run = write_run(tmp_path / "deit", gates=False)
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"epoch": 9, "nonlocality/L0": "far"}) + "\n")
    with pytest.warns(UserWarning, match=r"metrics\.jsonl: line\(s\) 6 are damaged"):
        written = render_run_analysis(run)
    assert [p.name for p in written] == ["nonlocality.png"]


def test_attention_figure_shows_every_layer_of_a_small_model_and_says_which(tmp_path):
    """A depth-4 ViT shows layers 0-3, not 0, 2 and 3 unexplained; a 12-layer one first, middle, last."""
    assert default_layers(4) == ([0, 1, 2, 3], "all")
    assert default_layers(12) == ([0, 6, 11], "first, middle and last")
    figure = attention_maps_figure(small_convit(), torch.randn(1, 3, 16, 24), title="ConViT")
    assert "layers 0, 1, 2 of 0-2 (all)" in " ".join(figure.get_suptitle().split())  # wrapped to the width
    chosen = attention_maps_figure(small_convit(), torch.randn(1, 3, 16, 24), layers=[1])
    assert "layers 1 of 0-2 (chosen)" in " ".join(chosen.get_suptitle().split())


def test_nonlocality_plot_has_a_title_and_whole_epoch_ticks(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr("convinit.analysis.plots._save", lambda fig, path: figures.append(fig) or path)
    plot_nonlocality({"ConViT": write_run(tmp_path / "convit")}, tmp_path / "n.png")
    assert figures[0].get_suptitle()
    ax = figures[0].axes[0]
    ticks = [t for t in ax.get_xticks() if 0 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_a_three_head_figure_keeps_its_long_title_inside_both_edges():
    """ViT-Ti's 3 heads make a 7.4-inch figure; its title and layer rule once ran past both edges."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    torch.manual_seed(0)
    model = create_model("simplevit", num_classes=3, img_size=16, in_chans=1, patch_size=4, dim=48, depth=12,
                         heads=3, dim_head=16, mlp_dim=8)  # fmt: skip
    title = "impulse (timm:vit_tiny_patch16_224, init impulse, fashion-mnist), checkpoint epoch-0015"
    figure = attention_maps_figure(model, torch.randn(1, 1, 16, 16), title=title)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    box = figure._suptitle.get_window_extent(canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= figure.bbox.width
    assert " ".join(figure.get_suptitle().split()).startswith(title)  # wrapped, not cut
