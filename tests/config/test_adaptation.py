"""Defaults never refuse each other: a preset's value adapts to an override it collides with, and
says so in one line; only values the user wrote are refused, naming where the other one came from."""

from __future__ import annotations

import pytest

from convinit.cli import main
from convinit.config import resolve_config, say_notes
from convinit.errors import ConfigError


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    """Each note is said once per process; every test here starts with none said."""
    monkeypatch.setattr("convinit.config.train_config._SAID", set())
    monkeypatch.setattr("convinit.config.train_config._PENDING", [])


def test_shortened_run_scales_the_presets_warmup_to_the_same_fraction(capsys):
    cfg = resolve_config("default", ["epochs=1"])  # default: 1 warm-up epoch of 20
    assert cfg.warmup_epochs == pytest.approx(0.05)
    assert capsys.readouterr().err == ""  # kept until the config is known to be usable
    say_notes()
    note = capsys.readouterr().err
    assert note.count("\n") == 1
    assert "warmup_epochs 1 of preset 'default' (set for its epochs=20) scaled to 0.05 for epochs=1" in note


def test_convit_preset_warmup_adapts_to_three_epochs():
    assert resolve_config("convit/small", ["epochs=3"]).warmup_epochs == pytest.approx(0.3)


def test_warmup_the_user_wrote_is_refused_naming_the_presets_epochs():
    with pytest.raises(ConfigError, match=r"warmup_epochs \(30.0, set by you\) must be shorter than "
                       r"epochs \(20, from preset 'default'\)"):  # fmt: skip
        resolve_config("default", ["warmup_epochs=30"])


def test_warmup_and_epochs_both_written_are_refused_as_the_users():
    with pytest.raises(
        ConfigError, match=r"\(2.0, set by you\) must be shorter than epochs \(1, set by you\)"
    ):
        resolve_config("default", ["epochs=1", "warmup_epochs=2"])


def test_runs_that_do_not_collide_keep_the_presets_warmup():
    assert resolve_config("default", ["epochs=40"]).warmup_epochs == 1.0


def test_lowered_lr_scales_the_presets_min_lr_by_the_same_ratio():
    cfg = resolve_config("deit", ["lr=1e-5"])  # deit: 5e-4 decaying to 1e-5
    assert cfg.min_lr == pytest.approx(1e-5 * 1e-5 / 5e-4)
    assert cfg.min_lr < cfg.lr


def test_min_lr_the_user_wrote_above_lr_is_refused():
    with pytest.raises(
        ConfigError, match=r"min_lr \(0.01, set by you\) must be below lr \(0.001, from preset"
    ):
        resolve_config("default", ["min_lr=1e-2"])


def test_user_subset_replaces_the_presets_other_subset_key(tmp_path, capsys):
    preset = tmp_path / "p.yaml"
    preset.write_text("extends: default\ntrain_fraction: 0.5\n")
    cfg = resolve_config(str(preset), ["per_class=10"])
    assert (cfg.per_class, cfg.train_fraction) == (10, None)
    say_notes()
    assert "train_fraction 0.5 of preset" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="set train_fraction or per_class, not both"):
        resolve_config("default", ["per_class=10", "train_fraction=0.5"])


def test_another_randaugment_policy_reads_the_presets_magnitude_on_its_scale():
    cfg = resolve_config("deit", ["randaugment_policy=torchvision"])  # deit: timm m9 mstd 0.5
    assert (cfg.randaugment_m, cfg.randaugment_mstd) == (27.0, 0.0)


def test_cli_train_epochs_1_no_longer_refuses_the_default_warmup(tmp_path, tiny_overrides, capsys):
    overrides = [o for o in tiny_overrides if not o.startswith(("warmup_epochs", "epochs"))]
    assert main(["train", *overrides, "epochs=1", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "scaled to 0.05 for epochs=1" in capsys.readouterr().err


def test_efficiency_refusal_names_the_method_and_where_each_value_came_from(tmp_path, capsys):
    argv = ["efficiency", "--method", "convit=convit/small warmup_epochs=5", "epochs=3"]
    assert main([*argv, "--out", str(tmp_path / "eff")]) == 2
    assert (
        "convinit: error: --method convit: warmup_epochs (5.0, set by you) must be shorter than "
        "epochs (3, set by you)" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "bad", ["lr=-1", "model_args.dimm=3", "dataset=folder"], ids=["config", "model", "data"]
)
def test_a_refused_run_says_only_its_error_not_the_adapted_warmup(bad, tmp_path, capsys):
    """epochs=1 adapts the preset's warm-up; the note would only stand before the error that matters."""
    argv = ["train", "epochs=1", bad, f"data_dir={tmp_path / 'none'}", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and err.count("\n") == 1


def test_a_timm_model_drops_only_the_presets_model_args_and_says_the_users_are_used(capsys):
    cfg = resolve_config("default", ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=7"])
    assert cfg.model_args == {"patch_size": 7}
    say_notes()
    note = capsys.readouterr().err
    assert "the model_args of preset default (for simplevit: patch_size=2, dim=64" in note
    assert "are dropped; yours (model_args.patch_size) are passed to it" in note and "not used" not in note
    resolve_config("default", ["model=timm:vit_tiny_patch16_224"])
    say_notes()
    assert "are dropped; timm:vit_tiny_patch16_224 starts from its own defaults" in capsys.readouterr().err
