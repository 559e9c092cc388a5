"""The report's pictures: curves with a title and whole epochs on the axis; the sample-efficiency plot's
log axis labelled at the training-set sizes measured, however few."""

from __future__ import annotations

from pathlib import Path

import pytest

from convinit.experiments.report import CellResult, plot_curves, plot_sweep, save_plot


@pytest.fixture
def drawn(monkeypatch):
    """The axes each plot saves, and the title it gives them (the PNG is still written)."""
    saved = []

    def keep(fig, ax, path, legend_size=8, title=None):
        saved.append((ax, title))
        save_plot(fig, ax, path, legend_size, title)

    monkeypatch.setattr("convinit.experiments.report.save_plot", keep)
    return saved


def run(label: str, seed: int, accuracies: list[float], images: int = 0) -> CellResult:
    metrics = [{"epoch": epoch, "test_acc": acc} for epoch, acc in enumerate(accuracies)]
    experiment = {"group": label, "train_images": images} if images else {}
    return CellResult(Path(f"{label}-{seed}"), label, seed, metrics, {}, experiment)


def test_curves_have_a_title_and_whole_epoch_ticks(tmp_path, drawn):
    plot_curves([run("a", 0, [10, 40, 60, 70]), run("b", 0, [10, 30, 50, 55])], tmp_path / "c.png", "Demo")
    ax, title = drawn[0]
    assert title == "Demo" and ax.get_title() == "Demo"
    ticks = [t for t in ax.get_xticks() if 0 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert (tmp_path / "c.png").stat().st_size > 0


def test_efficiency_plot_of_two_sizes_is_labelled_at_those_sizes(tmp_path, drawn):
    records = [run(m, s, [10, acc + s], n) for m in ("random", "impulse") for s in (0, 1)
               for n, acc in ((250, 60.0), (1000, 80.0))]  # fmt: skip
    assert plot_sweep(records, "train_images", tmp_path / "e.png", "training images", log_x=True)
    ax, title = drawn[0]
    assert ax.get_xscale() == "log" and "training images" in title
    assert list(ax.get_xticks()) == [250, 1000]
    assert [label.get_text() for label in ax.get_xticklabels()] == ["250", "1000"]
    low, high = ax.get_xlim()
    assert low < 250 and high > 1000  # neither point sits on the frame


def test_efficiency_rows_at_the_same_sizes_are_drawn_apart_not_over_each_other(tmp_path, drawn):
    records = [run(m, s, [10, acc + s], n) for m in ("random", "impulse") for s in (0, 1)
               for n, acc in ((250, 60.0), (1000, 80.0))]  # fmt: skip
    plot_sweep(records, "train_images", tmp_path / "e.png", "training images", log_x=True)
    ax, title = drawn[0]
    first, second = (container.lines[0].get_xdata() for container in ax.containers)
    for x, a, b in zip((250, 1000), first, second, strict=True):
        assert a < x < b and b / a < 1.2  # either side of the size, close to it, centred on it
        assert a * b == pytest.approx(x * x)
    assert list(ax.get_xticks()) == [250, 1000] and "set slightly apart" in title


def test_curves_of_rows_with_different_epochs_say_so(tmp_path, drawn):
    plot_curves([run("a", 0, [10, 40, 60, 70]), run("b", 0, [10, 30])], tmp_path / "c.png", "Grid")
    assert drawn[0][1] == "Grid\n(rows ran 1 to 3 epochs: each line ends at its own last)"
    plot_curves([run("a", 0, [10, 40]), run("b", 0, [10, 30])], tmp_path / "d.png", "Grid")
    assert drawn[1][1] == "Grid"
