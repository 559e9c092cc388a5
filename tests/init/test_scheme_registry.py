"""The init-scheme registry finds each scheme by importing every module of `convinit.init.schemes`."""

from __future__ import annotations

import pkgutil

import pytest
import torch.nn as nn

import convinit.init.schemes
from convinit.errors import ConfigError
from convinit.init import initialize, list_schemes
from convinit.init.registry import SCHEMES
from tests.naming.dropped_module import dropped_module

DROPPED_SCHEME = """
import torch

from convinit.init.registry import register_scheme


@register_scheme("zeros")
def zeros_init(model, value=0.0):
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(value)
    return {"value": value}
"""


def test_the_shipped_schemes_are_one_module_each_of_the_schemes_package():
    package = convinit.init.schemes
    modules = {module.name for module in pkgutil.iter_modules(package.__path__)}
    assert list_schemes() == sorted(m.replace("_", "-") for m in modules)
    assert list_schemes() == ["impulse", "mimetic", "random", "scaled-position"]
    assert {SCHEMES.get(name).__module__ for name in list_schemes()} == {
        f"{package.__name__}.{name}" for name in modules
    }


def test_an_unknown_scheme_is_refused_with_every_scheme_listed():
    with pytest.raises(
        ConfigError,
        match=r"^unknown init scheme 'magic'; choose one of: impulse, mimetic, random, scaled-position$",
    ):
        initialize(nn.Linear(2, 2), "magic")


def test_a_scheme_file_added_to_the_schemes_package_is_applied_by_name_with_nothing_else_changed(tmp_path):
    model = nn.Linear(3, 2)
    with dropped_module(SCHEMES, tmp_path, DROPPED_SCHEME):
        assert "zeros" in list_schemes()
        report = initialize(model, "zeros", value=0.5)
    assert report["scheme"] == "zeros" and report["value"] == 0.5
    assert all((parameter == 0.5).all() for parameter in model.parameters())
    assert "zeros" not in list_schemes()
