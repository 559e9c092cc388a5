"""`initialize` checks its inputs first and changes nothing unless it succeeds.

Unusable images (NaN, inf, huge, integer, the wrong channels or size, numpy arrays, lists, meta
tensors) and models holding NaN weights ended in `linalg.svd` errors or the model's own, after the
learned position table had already been multiplied by 18; `random` and `mimetic` reported NaN figures.
Each is now one ConfigError line, and after any failure every tensor of the model is exactly as before.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.models.external import build_model_by_name

SHAPE = {"num_classes": 10, "img_size": 16, "in_chans": 3}
FAMILIES = {
    "timm": ("timm:vit_tiny_patch16_224", {"patch_size": 4, "embed_dim": 32, "depth": 2, "num_heads": 2}),
    "convinit": (
        "simplevit",
        {"patch_size": 4, "dim": 32, "depth": 2, "heads": 2, "dim_head": 16, "mlp_dim": 32},
    ),
    "transformers": (
        "hf:vit",
        {
            "patch_size": 4,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 32,
        },
    ),
}
QK_WEIGHT = {"timm": "blocks.0.attn.qkv.weight", "convinit": "blocks.0.attn.to_qk.weight",
             "transformers": "model.vit.layers.0.attention.q_proj.weight",  # transformers 5
             "transformers 4": "model.vit.encoder.layer.0.attention.attention.query.weight"}  # fmt: skip
GOOD = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def model_of(family: str) -> nn.Module:
    if family in ("timm", "transformers"):
        pytest.importorskip(family)
    name, args = FAMILIES[family]
    torch.manual_seed(0)
    return build_model_by_name(name, **SHAPE, **args)


def tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def assert_unchanged(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name, value in before.items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=0, equal_nan=True, msg=name)


def with_nan(images: torch.Tensor) -> torch.Tensor:
    images = images.clone()
    images[0, 0, 0, 0] = float("nan")
    return images


BAD_IMAGES = {
    "nan": (with_nan(GOOD), "NaN or infinite"),
    "inf": (GOOD.clone().fill_(float("inf")), "NaN or infinite"),
    "huge": (GOOD * 1e30, "images reach"),
    "channels": (torch.randn(8, 1, 16, 16), "1 channels but the model takes 3"),
    "size": (torch.randn(8, 3, 20, 20), "(20, 20) pixels but the model takes (16, 16)"),
    "uint8": ((GOOD.abs() * 50).to(torch.uint8), "must be floating point"),
    "int64": (GOOD.long(), "must be floating point"),
    "bool": (GOOD > 0, "must be floating point"),
    "numpy": (GOOD.numpy(), "must be a torch.Tensor"),
    "list": (GOOD.tolist(), "must be a torch.Tensor"),
    "meta": (torch.empty(8, 3, 16, 16, device="meta"), "meta device"),
    "empty-batch": (GOOD[:0], "non-empty (B, C, H, W)"),
    "one-image-3d": (GOOD[0], "non-empty (B, C, H, W)"),
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", BAD_IMAGES)
def test_unusable_images_are_refused_in_one_line_and_change_nothing(family, case):
    images, message = BAD_IMAGES[case]
    for scheme in ("impulse", "mimetic", "random"):
        model = model_of(family)
        before = tensors(model)
        with pytest.raises(ConfigError, match="^[^\n]*$") as info:
            initialize(model, scheme, images=images)
        assert message in str(info.value)
        assert_unchanged(model, before)


@pytest.mark.parametrize("family", FAMILIES)
def test_nan_qk_weights_are_refused_and_left_as_they_were(family):
    model = model_of(family)
    with torch.no_grad():
        names = dict(model.named_parameters())
        name = QK_WEIGHT[family] if QK_WEIGHT[family] in names else QK_WEIGHT[f"{family} 4"]
        names[name].fill_(float("nan"))
    before = tensors(model)
    with pytest.raises(ConfigError, match="holds NaN or infinite values"):
        initialize(model, "impulse", images=GOOD)
    assert_unchanged(model, before)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_scheme_failing_midway_leaves_every_tensor_as_it_was(family, monkeypatch):
    """The position table is prepared (x 18 on timm) before the layers are fitted: a fit that fails
    must not leave that change behind."""
    from convinit.init.schemes import impulse

    def fail(*args, **kwargs):
        raise RuntimeError("provoked")

    monkeypatch.setattr(impulse, "fit_every_layer", fail)
    model = model_of(family)
    before = tensors(model)
    parameters = dict(model.named_parameters())
    with pytest.raises(ConfigError, match=r"^impulse init failed \(RuntimeError: provoked\); the model was"):
        initialize(model, "impulse", images=GOOD)
    assert_unchanged(model, before)
    assert all(p is parameters[name] for name, p in model.named_parameters())  # the same objects


@pytest.mark.parametrize("scheme", ["random", "mimetic", "impulse"])
def test_every_scheme_reports_finite_figures_or_refuses(scheme, monkeypatch):
    """A NaN that reaches a report (here a measure that returns one) is a refusal, the model unchanged."""
    from convinit.init import measure

    model = model_of("convinit")
    before = tensors(model)
    real = measure.real_pass_quality  # random, mimetic and scaled-position measure through it
    monkeypatch.setattr(measure, "real_pass_quality", lambda *a: {**real(*a), "mean_entropy": float("nan")})
    if scheme == "impulse":  # impulse measures itself: poison its summary instead
        from convinit.init.schemes import impulse

        summarise = impulse.summarise
        monkeypatch.setattr(impulse, "summarise", lambda *a: {**summarise(*a), "mean_mass": float("nan")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError, match="non-finite figure"):
            initialize(model, scheme, images=GOOD)
    assert_unchanged(model, before)


def test_double_images_are_taken_in_the_models_float_type():
    model = model_of("convinit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = initialize(model, "random", images=GOOD.double())
    assert np.isfinite(report["real_pass"]["mean_entropy"])


@pytest.mark.parametrize(
    "scheme, options, message",
    [
        ("mimetic", {"a1": "x"}, "mimetic init option a1 must be a number, got 'x' (str)"),
        ("mimetic", {"seed": "a"}, "mimetic init option seed must be an integer or null, got 'a' (str)"),
        ("impulse", {"seed": 1.5}, "impulse init option seed must be an integer or null, got 1.5 (float)"),
        ("random", {"held_out": "a"}, "random init option held_out must be a number, got 'a' (str)"),
        ("mimetic", {"held_out": [0.5]}, "mimetic init option held_out must be a number, got [0.5] (list)"),
    ],
)
def test_the_python_api_refuses_options_of_the_wrong_type_in_one_config_error_line(scheme, options, message):
    """These ended in Python's and torch's own TypeError and RuntimeError (manual_seed expected a long;
    '<=' not supported between float and str)."""
    model = model_of("convinit")
    before = tensors(model)
    with pytest.raises(ConfigError, match="^[^\n]*$") as info:
        initialize(model, scheme, images=GOOD, **options)
    assert str(info.value).startswith(message)
    assert_unchanged(model, before)


@pytest.mark.parametrize("scheme", ["random", "mimetic", "impulse"])
def test_a_model_without_parameters_is_one_config_error_line_not_stop_iteration(scheme):
    with pytest.raises(ConfigError, match="^the ReLU given to initialize has no parameters to initialise$"):
        initialize(nn.ReLU(), scheme, images=GOOD)


def test_a_scheme_that_writes_an_infinite_weight_with_a_finite_report_is_refused_and_undone(monkeypatch):
    """The report is not the weights: here mimetic's output projection is written inf while every
    figure it reports stays finite."""
    from convinit.init.schemes import mimetic

    def infinite_out_weight(slot, *args, **kwargs):
        with torch.no_grad():
            slot.out_weight.fill_(float("inf"))

    monkeypatch.setattr(mimetic, "mimetic_value_proj", infinite_out_weight)
    model = model_of("convinit")
    before = tensors(model)
    with pytest.raises(ConfigError, match=r"^mimetic init wrote NaN or infinite values into the model's "):
        initialize(model, "mimetic")
    assert_unchanged(model, before)
