"""Experiment trackers: TensorBoard event files hold the run's scalars; missing packages give the pip hint."""

from __future__ import annotations

import pytest

from convinit.config import resolve_config
from convinit.errors import ConfigError
from convinit.train import train


def test_tensorboard_logger_writes_step_epoch_and_init_scalars(tmp_path, tiny_overrides):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = resolve_config(None, tiny_overrides + ["logger=[csv,tensorboard]", "init=mimetic"])
    run = train(cfg, run_dir=tmp_path / "run", progress=False)
    events = EventAccumulator(str(run.run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"step/loss", "step/lr", "step/images_per_s", "epoch/test_acc", "init/seconds"} <= tags
    accuracy = [e.value for e in events.Scalars("epoch/test_acc")]
    assert accuracy[-1] == pytest.approx(run.metrics[-1]["test_acc"])
    assert "git_commit" in str(events.Tensors("provenance/text_summary")[0].tensor_proto)
    assert set(events.Tags()["images"]) == {"augmentations", "attention/init", "attention/trained"}
    grid = events.Images("augmentations")[0]
    assert (grid.width, grid.height) == (8 * 66 + 2, 4 * (66 + 14) + 2)  # the grid of augmentations.png
    assert events.Images("attention/trained")[0].step == run.metrics[-1]["epoch"] * 10  # 10 steps an epoch


def test_missing_tracker_package_is_a_one_line_pip_hint(tiny_overrides, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r'pip install "convinit\[wandb\]"'):
        train(resolve_config(None, tiny_overrides + ["logger=[wandb]"]), progress=False)


def test_unknown_logger_is_rejected(tiny_overrides):
    with pytest.raises(ConfigError, match="unknown logger 'mlflow'"):
        train(resolve_config(None, tiny_overrides + ["logger=[mlflow]"]), progress=False)


def test_wandb_logger_works_offline(tmp_path, tiny_overrides, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = train(resolve_config(None, tiny_overrides + ["logger=[csv,wandb]"]), run_dir=tmp_path / "run",
                progress=False)  # fmt: skip
    offline_runs = list((run.run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    assert any(p.suffix == ".wandb" and p.stat().st_size > 0 for p in offline_runs[0].iterdir())
