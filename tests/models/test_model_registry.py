"""The registry builds each preset with its own shape defaults (timm's convention)."""

from __future__ import annotations

import pytest
import torch

from convinit import create_model, list_models
from convinit.models.registry import SHAPE_ARGUMENTS, model_arguments, register_model


def test_convit_tiny_without_arguments_has_timm_shape_and_loads_its_state_dict():
    timm = pytest.importorskip("timm")
    model = create_model("convit_tiny")
    reference = timm.create_model("convit_tiny", pretrained=False)
    assert (model.num_classes, model.img_size) == (1000, (224, 224))
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert ours == theirs
    model.load_state_dict(reference.state_dict())


def test_deit_tiny_without_arguments_loads_timm_deit_state_dict():
    timm = pytest.importorskip("timm")
    reference = timm.create_model("deit_tiny_patch16_224", pretrained=False)
    create_model("deit_tiny").load_state_dict(reference.state_dict())


@pytest.mark.parametrize("name", list_models())
def test_every_preset_records_its_own_shape_defaults(name):
    accepted = model_arguments(name)
    with torch.device("meta"):
        model = create_model(name)
    assert {k: model.model_kwargs[k] for k in SHAPE_ARGUMENTS} == {
        k: accepted[k].default for k in SHAPE_ARGUMENTS
    }


def test_given_shape_arguments_override_the_preset():
    model = create_model("convit_tiny", num_classes=10, img_size=32, in_chans=1, patch_size=4)
    assert model.model_kwargs == {"num_classes": 10, "img_size": 32, "in_chans": 1, "patch_size": 4}
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 10)


def test_a_preset_without_shape_defaults_cannot_register():
    def no_defaults(num_classes, img_size=32, in_chans=3):
        raise AssertionError("never built")

    with pytest.raises(ValueError, match="needs a default for num_classes"):
        register_model(no_defaults)
