"""The images a run's init fits on and is measured with: the same 48 fitted on as ever, and 128 held apart
(enough for a stable held-apart figure), so that a run's initial weights do not change."""

from __future__ import annotations

import warnings

import pytest
import torch

from convinit.config import resolve_config
from convinit.data.source import build_data
from convinit.train.opening import init_images, initialize_model, open_model, source_shape
from convinit.train.plan import data_recipe, resolve_plan
from convinit.train.process import seed_everything


def initialised(scheme: str, batch) -> tuple[dict, dict]:
    cfg = resolve_config(None, [f"init={scheme}", "device=cpu", "model_args.depth=2"])
    seed_everything(cfg.seed, False)
    data = build_data(data_recipe(cfg), torch.device("cpu"))
    model = open_model(resolve_plan(cfg), source_shape(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = initialize_model(resolve_plan(cfg).init, model, batch(data))
    return model.state_dict(), report


@pytest.mark.parametrize("scheme", ["impulse", "mimetic"])
def test_the_init_is_measured_on_128_held_apart_images_and_fitted_as_before(scheme):
    before, old = initialised(scheme, lambda data: data.init_batch())
    after, new = initialised(scheme, init_images)
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert old["real_pass"] == new["real_pass"]
    assert (old["real_pass_held_out"]["images"], new["real_pass_held_out"]["images"]) == (16, 128)


def test_the_init_images_begin_with_the_64_of_init_batch(digits):
    cfg = resolve_config(None, ["device=cpu"])
    data = build_data(data_recipe(cfg), torch.device("cpu"))
    images = init_images(data)
    assert torch.equal(images[:64], data.init_batch()) and len(images) == 64 + 112
