"""The preset table is the registry's presets: a row added is a model listed and built, with its arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from convinit.cli import main
from convinit.errors import ConfigError
from convinit.models import registry
from convinit.models.presets import PRESETS, Preset
from convinit.models.registry import FAMILIES, SHAPE_ARGUMENTS, create_model, list_models, model_arguments
from convinit.naming.registry import Registry

# a ConViT smaller than any shipped one: one row, nothing else
PICO = Preset(
    "convit",
    dict(
        num_classes=7,
        img_size=16,
        in_chans=1,
        patch_size=4,
        embed_dim=36,
        num_heads=9,
        depth=2,
        local_up_to_layer=1,
    ),
    "ConViT-Pico: D 36, 9 heads of 4, depth 2 (a test row)",
)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_a_preset_added_as_one_row_is_listed_and_created(monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "convit_pico", PICO)
    assert "convit_pico" in list_models()
    assert main(["models"]) == 0 and "convit_pico" in capsys.readouterr().out.split()
    model = create_model("convit_pico")
    assert model.model_name == "convit_pico"
    assert model.model_kwargs == {"num_classes": 7, "img_size": 16, "in_chans": 1}
    assert model(torch.zeros(2, 1, 16, 16)).shape == (2, 7)
    assert model_arguments("convit_pico")["embed_dim"].default == 36


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_builds_with_the_parameter_count_and_model_kwargs_its_row_says(name):
    row = PRESETS[name]
    with torch.device("meta"):
        model = create_model(name)
        from_row = FAMILIES.get(row.family).builder(**row.args, **row.fixed)
    assert parameter_count(model) == parameter_count(from_row)
    shapes = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    assert shapes == {key: tuple(value.shape) for key, value in from_row.state_dict().items()}
    assert model.model_kwargs == {key: row.args[key] for key in SHAPE_ARGUMENTS}
    accepted = model_arguments(name)
    assert {key: accepted[key].default for key in row.args} == row.args
    assert not set(row.fixed) & set(accepted)  # what the row fixes, a caller cannot change


def test_a_fixed_argument_is_refused_like_an_unknown_one():
    with pytest.raises(ConfigError, match="model 'vit_tiny_patch2_32' takes no argument depth; it accepts: "):
        create_model("vit_tiny_patch2_32", depth=2)


def test_a_row_setting_an_option_its_family_does_not_take_cannot_build(monkeypatch):
    # ConViT's presets keep partial_local_init at its default: a row that sets it says so at once, not by
    # a silent default
    monkeypatch.setitem(
        PRESETS, "convit_partial", Preset("convit", dict(PICO.args, partial_local_init=True), "bad row")
    )
    with pytest.raises(
        ValueError, match="'convit_partial' sets partial_local_init: its convit family takes no such"
    ):
        create_model("convit_partial")


def test_a_row_without_a_value_its_builder_needs_cannot_build(monkeypatch):
    monkeypatch.setitem(
        PRESETS, "vit_headless", Preset("vit", dict(num_classes=10, img_size=32, in_chans=3), "x")
    )
    with pytest.raises(ValueError, match="preset 'vit_headless' gives no value for patch_size"):
        create_model("vit_headless")


def test_a_registered_builder_is_listed_and_cannot_take_a_preset_name(monkeypatch):
    monkeypatch.setattr(registry, "REGISTERED", Registry("model"))

    def my_linear(num_classes: int = 3, img_size: int = 4, in_chans: int = 1) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_chans * img_size**2, num_classes))

    registry.register_model(my_linear)
    assert "my_linear" in list_models()
    assert create_model("my_linear", num_classes=5).model_kwargs == {
        "num_classes": 5,
        "img_size": 4,
        "in_chans": 1,
    }

    def convit_tiny(num_classes: int = 3, img_size: int = 4, in_chans: int = 1) -> torch.nn.Module:
        raise AssertionError("never built")

    with pytest.raises(ValueError, match="model 'convit_tiny' is registered twice"):
        registry.register_model(convit_tiny)


def test_listing_the_models_needs_no_torch():
    script = (
        "import sys\nfrom convinit.models.registry import list_models\n"
        "assert 'convit_tiny' in list_models()\nprint('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
