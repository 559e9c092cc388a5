"""A user's own ViT trained from scratch gets the recipe the results page finds best, unless anyone chose.

The recipe is the users'-ViT grid's best ViT row (users-vit-end); a run whose convert or init the user or
a named preset set, one that asks for pretrained weights, convinit's own models and `recommended=none`
get exactly what they configured.
"""

from __future__ import annotations

import pytest

from convinit.config import parse_overrides, resolve_config
from convinit.config import train_config as config_module
from convinit.config.recommendation import RECOMMENDED, as_overrides
from convinit.experiments.grid import load_experiment

TIMM = ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=2", "model_args.embed_dim=16"]
RECIPE = {key: RECOMMENDED[key] for key in ("convert", "convert_args", "init", "init_args")}
BEST_ROW = "blend conversion + impulse + content projection"


def recipe_of(cfg) -> dict:
    return {key: getattr(cfg, key) for key in RECIPE}


def test_the_recipe_is_the_users_vit_grids_best_vit_row():
    row = next(row for row in load_experiment("users-vit-end")["rows"] if row["label"] == BEST_ROW)
    grid_row = parse_overrides([f"{key}={value}" for key, value in row["overrides"].items()])
    assert parse_overrides(as_overrides(RECOMMENDED)) == grid_row


@pytest.mark.parametrize("model", ["timm:vit_tiny_patch16_224", "hf:vit"])
def test_a_timm_or_transformers_vit_from_scratch_gets_the_recipe_and_records_it(model):
    cfg = resolve_config(None, [f"model={model}"])
    assert recipe_of(cfg) == RECIPE and cfg.recommended == "applied"


def test_the_own_data_preset_with_a_users_vit_gets_the_recipe():
    cfg = resolve_config(None, ["dataset=folder", "data_dir=photos", *TIMM])
    assert recipe_of(cfg) == RECIPE


def test_a_named_preset_without_a_method_gets_the_recipe():
    assert recipe_of(resolve_config("own_models/timm_vit_small")) == RECIPE


@pytest.mark.parametrize(
    "chosen",
    [["init=random"], ["init=impulse"], ["convert=gpsa"], ["init_args.seed=1"], ["recommended=none"]],
    ids=["init-random", "init-impulse", "convert-gpsa", "init-args", "recommended-none"],
)
def test_a_run_whose_user_chose_convert_or_init_or_turned_it_off_gets_exactly_that(chosen):
    cfg = resolve_config(None, [*TIMM, *chosen])
    given = parse_overrides(chosen)
    as_configured = {"convert": None, "convert_args": {}, "init": "random", "init_args": {}}
    assert recipe_of(cfg) == {key: given.get(key, value) for key, value in as_configured.items()}
    assert cfg.recommended == given.get("recommended", "auto")


def test_a_named_preset_that_sets_init_keeps_it():
    cfg = resolve_config("own_data", TIMM)  # named: its impulse init is its choice
    assert (cfg.convert, cfg.init, cfg.recommended) == (None, "impulse", "auto")


def test_convinits_own_models_are_not_converted():
    assert resolve_config(None, []).recommended == "auto" and resolve_config(None, []).convert is None


def test_a_run_asking_for_pretrained_weights_is_never_converted_unasked():
    from convinit.config.recommendation import wants_recommendation

    values = {"model": "timm:vit_tiny_patch16_224", "model_args": {"pretrained": True}}
    assert not wants_recommendation(values, {"model", "model_args"})
    with pytest.raises(ValueError, match="not from weights named in model_args"):  # refused as before
        from convinit.train.validation import validate

        validate(resolve_config(None, [*TIMM, "model_args.pretrained=true", "device=cpu"]))


def test_the_recipe_is_announced_in_one_line_naming_the_key_that_turns_it_off(monkeypatch, capsys):
    monkeypatch.setattr(config_module, "_SAID", set())
    monkeypatch.setattr(config_module, "_PENDING", [])
    resolve_config(None, TIMM)
    resolve_config(None, [*TIMM, "init=random"])
    config_module.say_notes()
    said = [line for line in capsys.readouterr().err.splitlines() if "recommended" in line]
    assert len(said) == 1
    assert "recommended=none" in said[0] and " ".join(as_overrides()) in said[0]
