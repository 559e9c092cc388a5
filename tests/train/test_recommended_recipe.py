"""A timm ViT trained from scratch trains with the recommended recipe, and its run rebuilds the same model;
one the recipe cannot go into trains as it is, with one line saying why; `convinit.recommend` names it."""

from __future__ import annotations

import pytest
import timm
import torch

import convinit
from convinit.config import load_config, resolve_config
from convinit.config import train_config as config_module
from convinit.config.recommendation import RECOMMENDED, as_overrides
from convinit.models.convert import converted_layers
from convinit.speed.stream import fabricate_folder
from convinit.train import train
from convinit.train.opening import open_run
from convinit.train.recommendation import HEADS_EVIDENCE, HEADS_SOURCE

TINY = ["epochs=1", "batch_size=200", "per_class=20", "eval_batch_size=500", "device=cpu", "warmup_epochs=0"]
# digits are 8x8: 2 px patches give a 4x4 grid (impulse's 5x5 kernel fits), 4 px ones a 2x2 grid (it does not,
# a 3x3 one does), 8 px ones a 1x1 grid (no kernel but 1x1 fits)
VIT = [
    "model=timm:vit_tiny_patch16_224",
    "model_args.embed_dim=16",
    "model_args.depth=1",
    "model_args.num_heads=2",
]


@pytest.fixture
def notes(monkeypatch, capsys):
    """The lines `convinit:` printed on stderr about the recommended recipe, from a fresh note list."""
    monkeypatch.setattr(config_module, "_SAID", set())
    monkeypatch.setattr(config_module, "_PENDING", [])
    return lambda: [line for line in capsys.readouterr().err.splitlines() if "recommended recipe" in line]


def blend_with_projection(model: torch.nn.Module) -> bool:
    layers = converted_layers(model)
    return bool(layers) and getattr(model, "conversion", {}).get("content_projection") is True


def test_a_timm_vit_from_scratch_trains_with_the_recipe_and_its_run_reopens_the_same_model(tmp_path, notes):
    run = train(
        resolve_config(None, [*VIT, "model_args.patch_size=2", *TINY]), tmp_path / "run", progress=False
    )
    said = notes()
    assert len(said) == 1 and "recommended=none" in said[0] and " ".join(as_overrides()) in said[0]
    assert blend_with_projection(run.model) and run.model.init_report["scheme"] == "impulse"
    saved = load_config(tmp_path / "run" / "config.yaml")
    assert (saved.recommended, saved.convert, saved.init) == ("applied", "blend", "impulse")
    assert saved.init_args == RECOMMENDED["init_args"]
    assert_reopens_the_same_model(run.model, tmp_path / "run")


def assert_reopens_the_same_model(model: torch.nn.Module, run_dir) -> None:
    reopened = open_run(run_dir).model
    assert blend_with_projection(reopened)
    for (name, mine), theirs in zip(model.state_dict().items(), reopened.state_dict().values(), strict=True):
        assert torch.equal(mine.cpu(), theirs), name


def test_recommended_none_trains_the_timm_vit_as_it_is(tmp_path, notes):
    cfg = resolve_config(None, [*VIT, "model_args.patch_size=2", "recommended=none", *TINY])
    run = train(cfg, tmp_path / "run", progress=False)
    assert not converted_layers(run.model) and notes() == []


def test_a_grid_too_small_for_the_5x5_kernel_trains_the_recipe_with_a_3x3_one_said_in_one_line(
    tmp_path, notes
):
    run = train(
        resolve_config(None, [*VIT, "model_args.patch_size=4", *TINY]), tmp_path / "run", progress=False
    )
    said = notes()
    assert len(said) == 1 and "init_args.kernel_size=3" in said[0] and "5x5 kernel does not fit" in said[0]
    assert blend_with_projection(run.model) and run.model.init_report["kernel_size"] == 3
    saved = load_config(tmp_path / "run" / "config.yaml")
    assert (saved.recommended, saved.init, saved.init_args) == (
        "applied",
        "impulse",
        {**RECOMMENDED["init_args"], "kernel_size": 3},
    )
    assert_reopens_the_same_model(run.model, tmp_path / "run")


def test_a_grid_too_small_for_the_recipe_trains_the_model_as_it_is_and_says_why_in_one_line(tmp_path, notes):
    run = train(
        resolve_config(None, [*VIT, "model_args.patch_size=8", *TINY]), tmp_path / "run", progress=False
    )
    said = notes()
    assert len(said) == 1 and "was not applied: impulse kernel_size=5 is larger than the 1x1" in said[0]
    assert not converted_layers(run.model) and run.model.init_report["scheme"] == "random"
    saved = load_config(tmp_path / "run" / "config.yaml")
    assert (saved.recommended, saved.convert, saved.init) == ("none", None, "random")


def test_a_folder_read_at_build_is_checked_on_its_shape_and_its_saved_config_says_what_trained(
    tmp_path, notes
):
    folder = fabricate_folder(tmp_path / "images", classes=2, per_class=3, val_per_class=1)
    data = [f"data_dir={folder}", "dataset=folder", "data_mode=device", "img_size=8", "per_class=null"]
    cfg = resolve_config(None, [*VIT, "model_args.patch_size=8", *TINY, *data])
    assert cfg.recommended == "applied"  # the shape is known once the folder is read
    run = train(cfg, tmp_path / "run", progress=False)
    said = notes()
    assert len(said) == 1 and "was not applied" in said[0] and not converted_layers(run.model)
    saved = load_config(tmp_path / "run" / "config.yaml")
    assert (saved.recommended, saved.convert) == ("none", None)
    assert not converted_layers(open_run(tmp_path / "run", data=False).model)


def test_recommend_names_the_recipe_and_its_figures_for_a_timm_vit_and_leaves_it_unchanged():
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=8, patch_size=2, embed_dim=16, depth=1, num_heads=2
    )
    found = convinit.recommend(model)
    assert found.overrides == RECOMMENDED and found.command_line == " ".join(as_overrides())
    assert "users-vit-end" in found.reason and "+-" in found.reason and "\n" not in found.reason
    assert not converted_layers(model)
    assert convinit.recommend("hf:vit").overrides == RECOMMENDED


def test_recommend_advises_on_heads_with_the_models_own_count_and_the_kept_figures_and_changes_nothing():
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=8, patch_size=2, embed_dim=16, depth=2, num_heads=2
    )
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    found = convinit.recommend(model)
    assert found.heads == f"this model has 2 heads of dim 8; {HEADS_EVIDENCE} ({HEADS_SOURCE})"
    assert str(found).endswith(f"\nheads: {found.heads}") and "\n" not in found.heads
    assert all(block.attn.num_heads == 2 for block in model.blocks) and not converted_layers(model)
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    assert convinit.recommend("hf:vit").heads == f"{HEADS_EVIDENCE} ({HEADS_SOURCE})"  # no model: no count
    assert convinit.recommend("simplevit").heads == ""  # convinit's own models carry their preset's method


def test_recommend_adapts_the_kernel_to_a_grid_too_small_for_5x5_in_one_line():
    two_by_two = timm.create_model(
        "vit_tiny_patch16_224", img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2
    )
    found = convinit.recommend(two_by_two)
    assert found.overrides == {**RECOMMENDED, "init_args": {**RECOMMENDED["init_args"], "kernel_size": 3}}
    assert "init_args.kernel_size=3" in found.command_line and "\n" not in found.reason
    assert found.reason.startswith("impulse init with a 3x3 kernel") and not converted_layers(two_by_two)
    convinit.initialize(
        convinit.convert(two_by_two, "blend", content_projection=True), "impulse", kernel_size=3
    )


def test_recommend_gives_no_keys_and_the_reason_for_a_model_that_cannot_take_it():
    small_grid = timm.create_model(
        "vit_tiny_patch16_224", img_size=8, patch_size=8, embed_dim=16, depth=1, num_heads=2
    )
    found = convinit.recommend(small_grid)
    assert found.overrides == {} and "impulse kernel_size=5" in found.reason
    assert convinit.recommend(torch.nn.Linear(2, 2)).overrides == {}
    assert convinit.recommend("simplevit").overrides == {}
