"""Random configurations either work or fail with one line: never a traceback.

Hypothesis draws config mappings around a small valid one: any registered model with random
arguments (its real ones with values of every type, plus unknown ones), random top-level keys
(valid and unknown) with values of every type, random init schemes and options, datasets and
devices. Each goes through what `convinit train` does before its first step: `build_config`,
`validate`, building and initialising the model, and one forward pass on a tiny batch on the
configured device. The only exception allowed is a ConvinitError with a one-line message.
"""

from __future__ import annotations

import typing

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convinit.analysis import list_trackers
from convinit.config import CHOICES, KEYS, TrainConfig, base_type, build_config
from convinit.errors import ConvinitError
from convinit.init import list_schemes
from convinit.models.registry import list_models, model_arguments
from convinit.train.opening import initialize_model
from convinit.train.plan import resolve_plan
from convinit.train.run_builder import check_forward
from convinit.train.validation import validate

COMMON = ("num_classes", "img_size", "in_chans")  # set from the dataset, not by model_args
SMALL = {  # sizes that keep every model a few thousand parameters, where it takes them
    "dim": 16,
    "embed_dim": 16,
    "depth": 2,
    "heads": 2,
    "num_heads": 4,
    "dim_head": 8,
    "mlp_dim": 16,
    "patch_size": 2,
    "local_up_to_layer": 1,
    "kernel_size": 3,
}
WORDS = ["x", "blend", "free", "input", "learned", "random", "impulse", "closed_form", "centre_first", ""]
ANY = st.one_of(  # any type at all
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "dim"]), st.integers(0, 3), max_size=1),
)
BY_TYPE = {  # values of the type an argument expects, within and around its valid range
    bool: st.booleans(),
    int: st.integers(-2, 12),
    float: st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.0, 1.0, float("nan"), float("inf")])),
    str: st.sampled_from(WORDS),
    list: st.lists(st.sampled_from([*list_trackers(), "nonsense"]), max_size=2),
    dict: st.dictionaries(
        st.sampled_from(["seed", "kernel_size", "a1", "offsets", "bogus"]), ANY, max_size=2
    ),
}
TOP_LEVEL = {  # keys whose useful values the type alone does not reach
    "model": st.sampled_from([*list_models(), "no_such_model"]),
    "dataset": st.sampled_from(["digits", "fashion-mnist", "cifar10", "no-such-set"]),
    "img_size": st.one_of(st.none(), st.integers(-1, 24)),  # bounded: the forward pass runs for real
    "device": st.sampled_from(["cpu", "auto", "cuda", "cuda:7", "cpu:x", "mps", "tpu", ""]),
    "init": st.sampled_from([*list_schemes(), "magic"]),
    **{key: st.sampled_from([*options, "other"]) for key, options in CHOICES.items()},
}
HINTS = typing.get_type_hints(TrainConfig)


def plausible(draw, annotation, default) -> object:
    """Mostly a value of the expected type; one time in four, anything."""
    kind = type(default) if default is not None else base_type(annotation) if annotation else None
    if kind not in BY_TYPE or draw(st.integers(0, 3)) == 0:
        return draw(ANY)
    return draw(BY_TYPE[kind])


@st.composite
def config_dicts(draw) -> dict:
    """A small valid config (digits on the CPU, a model shrunk by SMALL) with up to 3 arguments of
    the model and up to 3 top-level keys replaced, unknown names included."""
    model = draw(TOP_LEVEL["model"])
    accepted = model_arguments(model) if model in list_models() else {}
    model_args = {k: v for k, v in SMALL.items() if k in accepted}
    names = [a for a in accepted if a not in COMMON]
    for name in draw(st.lists(st.sampled_from([*names, "bogus_arg"]), max_size=3, unique=True)):
        default = accepted[name].default if name in accepted else None
        model_args[name] = plausible(draw, None, default)
    values = {"model": model, "model_args": model_args, "dataset": "digits", "device": "cpu"}
    for key in draw(st.lists(st.sampled_from([*KEYS, "epoch", "bogus"]), max_size=3, unique=True)):
        if key == "model_args":
            continue
        if key in TOP_LEVEL and draw(st.booleans()):
            values[key] = draw(TOP_LEVEL[key])
        else:
            values[key] = plausible(draw, HINTS.get(key), None)
    return values


def prepare_and_forward(values: dict) -> None:
    """What `train` does up to its first step, with two random images for the test images."""
    cfg = build_config(values)
    plan = validate(cfg)
    model = plan.model.build()
    initialize_model(resolve_plan(cfg).init, model)
    model.to(plan.device)
    shape = plan.shape
    size = (shape.img_size, shape.img_size) if isinstance(shape.img_size, int) else shape.img_size
    images = torch.randn(2, shape.in_chans, *size, device=plan.device)
    check_forward(plan, model, images, shape.num_classes)


@settings(
    max_examples=100,  # about 2 s: most draws fail fast, the rest build models of a few thousand weights
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # dim=0 draws, refused later
@given(config_dicts())
def test_any_config_works_or_fails_with_one_line(values):
    try:
        prepare_and_forward(values)
    except ConvinitError as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
