"""The init-scheme registry finds each scheme by importing every module of `convinit.init.schemes`."""

from __future__ import annotations

import math
import pkgutil

import pytest
import torch.nn as nn

import convinit.init.schemes
from convinit.cli import main
from convinit.errors import ConfigError
from convinit.init import initialize, list_schemes
from convinit.init.registry import SCHEMES, init_spec
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


@pytest.mark.parametrize(
    "scheme, options, message",
    [
        ("impulse", {"logit_gap": 1e30}, r"logit_gap must be in \(0, max_gap=10000\]"),
        ("impulse", {"max_gap": 1e30}, "max_gap must be at most 10000"),
        ("impulse", {"bump_width": math.inf}, "option bump_width must be a finite number, got inf"),
        ("impulse", {"kernel_size": True}, r"option kernel_size must be an integer, got True \(bool\)"),
        ("impulse", {"share_offsets": "nope"}, "option share_offsets must be true or false, got 'nope'"),
        ("impulse", {"share_offsets": "no"}, "option share_offsets must be true or false, got 'no'"),
        ("impulse", {"sincos_pos_embed": "no"}, "option sincos_pos_embed must be true or false, got 'no'"),
        ("impulse", {"seed": 1.5}, "option seed must be an integer or null, got 1.5"),
        ("impulse", {"seed": -1}, r"option seed must be in \[0, 2\*\*63\)"),
        ("impulse", {"pos_embed_scale": 1e30}, r"impulse pos_embed_scale must be in \(0, 1000\]"),
        ("scaled-position", {"pos_embed_scale": math.inf}, "option pos_embed_scale must be a finite number"),
        (
            "scaled-position",
            {"pos_embed_scale": 1e30},
            r"scaled-position pos_embed_scale must be in \(0, 1000\]",
        ),
        ("scaled-position", {"learned_pos_embed": "keep"}, "learned_pos_embed must be 'scale' or 'sincos'"),
        ("mimetic", {"a1": "x"}, "option a1 must be a number, got 'x'"),
        ("mimetic", {"value_proj": "no"}, "option value_proj must be true or false or null, got 'no'"),
        ("mimetic", {"held_out": 2}, r"mimetic held_out must be in \[0, 1\), got 2"),
        ("mimetic", {"variant": "official"}, "variant must be one of trockman_kolter, paper1"),
        ("random", {"held_out": 1.0}, r"random held_out must be in \[0, 1\), got 1.0"),
    ],
)
def test_option_values_of_the_wrong_type_not_finite_or_out_of_range_are_refused_before_any_model(
    scheme, options, message
):
    """init_spec is what validation runs before a run folder exists: each value is refused there, in one
    line, not after the model is built (mimetic held_out=2) nor by training (logit_gap=1e30 diverged)."""
    with pytest.raises(ConfigError, match=message) as info:
        init_spec(scheme, options)
    assert "\n" not in str(info.value)


def test_init_option_values_are_refused_before_the_run_folder_exists(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "init=mimetic", "init_args.held_out=2", "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err == "convinit: error: mimetic held_out must be in [0, 1), got 2\n"
    assert not out.exists()
