"""The tracker registry finds each tracker by importing every module of `convinit.analysis.trackers`."""

from __future__ import annotations

import pkgutil

import pytest
import torch
import torch.nn as nn

import convinit.analysis.trackers
from convinit.analysis import TRACKERS, get_tracker, list_trackers
from convinit.errors import ConfigError
from convinit.train.trainer import run_trackers
from tests.naming.dropped_module import dropped_module

DROPPED_TRACKER = """
from convinit.analysis import register_tracker


@register_tracker("weight_norm")
def weight_norm_tracker(model, images):
    return {"weight_norm": float(sum(p.norm() ** 2 for p in model.parameters()) ** 0.5)}
"""


def test_the_shipped_trackers_are_one_module_each_of_the_trackers_package():
    package = convinit.analysis.trackers
    modules = {module.name for module in pkgutil.iter_modules(package.__path__)}
    assert list_trackers() == sorted(modules) == ["gates", "init_quality", "nonlocality"]
    assert {get_tracker(name).__module__ for name in list_trackers()} == {
        f"{package.__name__}.{name}" for name in modules
    }


def test_an_unknown_tracker_is_refused_with_every_tracker_listed():
    with pytest.raises(ConfigError) as refused:
        get_tracker("nonsense")
    assert str(refused.value) == "unknown tracker 'nonsense'; choose from: gates, init_quality, nonlocality"


def test_a_tracker_file_added_to_the_trackers_package_runs_by_name_with_nothing_else_changed(tmp_path):
    model = nn.Linear(3, 4, bias=False)
    with dropped_module(TRACKERS, tmp_path, DROPPED_TRACKER):
        values = run_trackers(model, ["weight_norm"], torch.zeros(1, 3))
    assert values == {"weight_norm": pytest.approx(float(model.weight.detach().norm()))}
    assert "weight_norm" not in list_trackers()
