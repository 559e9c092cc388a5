"""A run on the user's own images starts with the convolutional bias; the plain baselines are one key away.

The method is the one docs/results.md shows best for a small ViT at a few hundred to 1,000 images (the
grid paper1-data-efficiency: impulse init on the blend ViT against the same model at random init).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from convinit.config import resolve_config

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ["dataset=folder", "data_dir=photos"]
BLEND = {"qk_input": "blend", "alpha": 0.1}


@pytest.mark.parametrize("source", [FOLDER, ["dataset=hf", "hf_name=user/name"]], ids=["folder", "hf"])
def test_own_images_without_a_preset_train_the_blend_vit_with_impulse_init(source):
    cfg = resolve_config(None, source)
    assert cfg.model == "simplevit" and cfg.init == "impulse"
    assert {key: cfg.model_args[key] for key in BLEND} == BLEND


def test_own_data_differs_from_the_default_preset_by_the_method_alone():
    own, plain = resolve_config(None, FOLDER).to_dict(), resolve_config("default", FOLDER).to_dict()
    changed = {key for key in own if own[key] != plain[key]}
    assert changed == {"init", "model_args"}
    assert own["model_args"] == {**plain["model_args"], **BLEND}


def test_init_random_is_the_same_model_at_random_init():
    own, baseline = resolve_config(None, FOLDER), resolve_config(None, [*FOLDER, "init=random"])
    assert baseline.init == "random" and baseline.model_args == own.model_args


def test_config_default_is_the_plain_vit_at_random_init():
    cfg = resolve_config("default", FOLDER)
    assert cfg.init == "random" and "qk_input" not in cfg.model_args


def test_the_embedded_and_public_datasets_keep_the_default_preset():
    for dataset in ("digits", "fashion-mnist"):
        cfg = resolve_config(None, [f"dataset={dataset}"])
        assert cfg.init == "random" and "qk_input" not in cfg.model_args


def test_the_default_is_the_model_and_init_the_results_page_measured():
    """The kept impulse runs of the data-efficiency grid used this blend and init (their patch size aside)."""
    own = resolve_config(None, FOLDER)
    runs = sorted((ROOT / "results" / "paper1-data-efficiency").glob("impulse-*/seed*/config.yaml"))
    assert runs, "the kept runs of the grid paper1-data-efficiency are missing"
    for path in runs:
        kept = yaml.safe_load(path.read_text())
        assert kept["init"] == own.init and kept["model"] == own.model
        assert {key: kept["model_args"][key] for key in BLEND} == BLEND
        same = ("dim", "depth", "heads", "dim_head", "mlp_dim")
        assert {key: kept["model_args"][key] for key in same} == {key: own.model_args[key] for key in same}


def test_a_run_on_own_images_says_in_one_line_which_method_it_trains_and_how_to_get_the_baseline(
    monkeypatch, capsys
):
    from convinit.config import train_config

    for chosen in ([], ["init=random"], ["model=convit_tiny"]):
        monkeypatch.setattr(train_config, "_SAID", set())
        monkeypatch.setattr(train_config, "_PENDING", [])
        resolve_config(None, FOLDER + chosen)
        train_config.say_notes()
        said = [line for line in capsys.readouterr().err.splitlines() if "preset own_data" in line]
        if chosen:  # the user chose the method: nothing to say
            assert said == []
        else:
            assert len(said) == 1 and "impulse init" in said[0] and "init=random" in said[0]
