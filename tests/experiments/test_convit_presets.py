"""ConViT's full-scale presets configure the recipe the paper states (docs/method.md §5)."""

from __future__ import annotations

from convinit.config import resolve_config
from convinit.experiments.grid import expand


def test_plus_models_train_at_the_papers_lowered_lr():
    cfg = resolve_config("convit/ablation", ["data_dir=."])
    assert cfg.model == "convit_small_plus"
    assert (cfg.lr, cfg.lr_base_batch) == (4e-4, 512)


def test_ablation_grid_configures_the_ten_percent_column_as_sample_efficiency_does():
    runs = expand("convit-ablation", "full", extra_overrides={"data_dir": "."})
    ten = [r for r in runs if r.extra["fraction"] == 0.1]
    full = [r for r in runs if r.extra["fraction"] == 1.0]
    assert len(ten) == len(full) == 7
    for run in ten:
        assert (run.config.train_fraction, run.config.subset_order, run.config.epochs) == (0.1, "first", 3000)
    assert [r.paper for r in ten] == [59.7, 57.4, 56.9, 54.6, 47.8, 54.3, 44.8]
    assert {r.extra["group"] for r in ten} == {r.extra["group"] for r in full}
