"""Config presets, overrides and validation."""

from __future__ import annotations

import pytest
import yaml

from convinit.config import (
    TrainConfig,
    config_differences,
    load_config,
    parse_overrides,
    preset_names,
    resolve_config,
    save_config,
)
from convinit.errors import ConfigError


def test_default_preset_is_used_without_config():
    cfg = resolve_config()
    assert cfg.model == "simplevit" and cfg.dataset == "digits"


def test_overrides_set_top_level_and_nested_keys():
    cfg = resolve_config(None, ["epochs=3", "lr=3e-3", "model_args.dim=48", "hflip=true"])
    assert cfg.epochs == 3 and cfg.lr == pytest.approx(3e-3) and cfg.hflip is True
    assert cfg.model_args["dim"] == 48 and cfg.model_args["depth"] == 4  # other preset entries kept


def test_override_values_parse_like_yaml():
    assert parse_overrides(["a=1", "b=1.5", "c=null", "d=x", "e=1e-4", "f=[1, 2]"]) == {
        "a": 1,
        "b": 1.5,
        "c": None,
        "d": "x",
        "e": 1e-4,
        "f": [1, 2],
    }


def test_comma_separated_list_for_track():
    assert resolve_config(None, ["track=nonlocality,gates"]).track == ["nonlocality", "gates"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("epoch=3", "unknown config key 'epoch'; did you mean 'epochs'?"),
        ("epochs=abc", "config key 'epochs' must be an integer, got 'abc' (str)"),
        ("epochs=0", "config key 'epochs' must be at least 1, got 0"),
        ("lr=-1", "config key 'lr' must be positive"),
        ("optimizer=lion", "config key 'optimizer' must be one of adam, adamw, sgd"),
        ("model_args=3", "config key 'model_args' must be a mapping"),
        ("hflip=1", "config key 'hflip' must be true or false"),
        ("train_fraction=1.5", "train_fraction' must be in (0, 1]"),
        ("label_smoothing=1.0", "'label_smoothing' must be in [0, 1)"),
        ("warmup_epochs=50", "warmup_epochs (50.0, set by you) must be shorter than epochs (20, from preset"),
        ("epochs", "is not key=value"),
        ("precision=fp8", "config key 'precision' must be one of auto, fp32, tf32, bf16, fp16, got 'fp8'"),
        ("compile=maybe", "config key 'compile' must be true or false"),
        ("channels_last=1", "config key 'channels_last' must be true or false"),
    ],
)
def test_invalid_config_is_one_line_config_error(override, message):
    with pytest.raises(ConfigError) as info:
        resolve_config(None, [override])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_preset_suggests_a_close_name():
    with pytest.raises(ConfigError, match="did you mean 'default'"):
        resolve_config("defualt")


def test_preset_file_extends_a_shipped_preset(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("extends: default\nepochs: 7\nmodel_args: {dim: 32}\n")
    cfg = resolve_config(str(path))
    assert cfg.epochs == 7 and cfg.model_args["dim"] == 32 and cfg.model_args["depth"] == 4


def test_preset_loop_is_rejected(tmp_path):
    (tmp_path / "a.yaml").write_text(f"extends: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"extends: {tmp_path / 'a.yaml'}\n")
    with pytest.raises(ConfigError, match="loop"):
        resolve_config(str(tmp_path / "a.yaml"))


def test_saved_config_round_trips(tmp_path):
    cfg = resolve_config(None, ["epochs=4", "track=[gates]"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg


def test_config_differences_names_changed_keys():
    assert config_differences(TrainConfig(), TrainConfig(epochs=5, lr=0.1)) == ["epochs", "lr"]


def test_every_shipped_preset_validates():
    for name in preset_names():
        resolve_config(name)


def test_a_relative_extends_is_found_beside_the_file_not_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "base.yaml").write_text("epochs: 4\n")
    (tmp_path / "presets" / "child.yaml").write_text("extends: base.yaml\nlr: 0.01\n")
    monkeypatch.chdir(tmp_path)  # no base.yaml here
    cfg = resolve_config(str(tmp_path / "presets" / "child.yaml"))
    assert (cfg.epochs, cfg.lr) == (4, 0.01)


def test_a_preset_that_extends_itself_is_reported_as_a_loop(tmp_path):
    (tmp_path / "self.yaml").write_text("extends: self.yaml\n")
    with pytest.raises(ConfigError, match="extends itself in a loop"):
        resolve_config(str(tmp_path / "self.yaml"))


def test_a_saved_config_from_before_the_drop_last_and_flush_keys_loads_as_it_ran(tmp_path):
    """Run folders written before `drop_last` and `flush_denormal` existed dropped the partial batch and
    did not flush subnormals; resuming, evaluating or comparing them must not silently change that."""
    cfg = resolve_config("default", [])
    save_config(cfg, tmp_path / "config.yaml")
    values = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (values["drop_last"], values["flush_denormal"]) == (False, True)
    saved = load_config(tmp_path / "config.yaml")
    assert (saved.drop_last, saved.flush_denormal) == (False, True)
    del values["drop_last"], values["flush_denormal"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(values))
    saved = load_config(tmp_path / "config.yaml")
    assert (saved.drop_last, saved.flush_denormal) == (True, False)


def test_the_paper_presets_keep_the_kept_grids_settings_and_a_users_run_gets_the_new_ones():
    for preset in ("paper1/recipe", "paper1/vit_small", "deit", "convit/small"):
        cfg = resolve_config(preset, [])
        assert (cfg.drop_last, cfg.flush_denormal) == (True, False), preset
    for preset in ("default", "own_data", "own_models/timm_vit_small"):
        cfg = resolve_config(preset, [])
        assert (cfg.drop_last, cfg.flush_denormal) == (False, True), preset


@pytest.mark.parametrize(
    "override, message",
    [
        ("randaugment_n=100000000", "config key 'randaugment_n' must be at most 15"),
        ("repeated_aug=1000000000", "config key 'repeated_aug' must be at most 16"),
        ("per_class=-1", "config key 'per_class' must be at least 1"),
        ("per_class=0", "config key 'per_class' must be at least 1"),
        ("max_nonfinite_skips=-1", "config key 'max_nonfinite_skips' must be 0 or more"),
    ],
)
def test_counts_out_of_bounds_or_of_the_wrong_sign_are_refused_by_the_config_checks(override, message):
    """Before the memory guard sizes a batch from them (per_class=-1 made a batch of -10 images) and
    before a batch is augmented 1e8 times or an epoch lists each image 1e9 times."""
    with pytest.raises(ConfigError) as info:
        resolve_config(None, [override])
    assert message in str(info.value) and "\n" not in str(info.value)
