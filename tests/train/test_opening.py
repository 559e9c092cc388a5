"""One way to open a run: the builder's order written once (`convinit.train.opening`), the plan's typed
parts (a data recipe, an init spec) instead of the configuration, and an unknown init refused before a
run folder, its data or its model exist."""

from __future__ import annotations

import pytest
import torch

from convinit.config import resolve_config
from convinit.errors import ConfigError
from convinit.init.registry import init_spec
from convinit.models import external
from convinit.train import opening, train
from convinit.train.opening import initialize_model, open_run
from convinit.train.plan import resolve_plan
from convinit.train.process import DistributedContext
from convinit.train.run_builder import build_run
from convinit.train.validation import validate


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def nothing_may_be_built(monkeypatch) -> None:
    """Reading data or constructing a model fails the test: a refusal must come before either."""

    def forbidden(*args, **kwargs):
        raise AssertionError("built before the refusal")

    monkeypatch.setattr(opening, "build_data", forbidden)
    monkeypatch.setattr(external, "build_model_by_name", forbidden)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("init=impuls", "unknown init scheme 'impuls'; did you mean 'impulse'?"),
        ("init_args.kernel_sise=3", "impulse init takes no option kernel_sise; did you mean 'kernel_size'?"),
        ("init_args.solver=newton", "impulse solver must be one of"),
    ],
)
def test_an_unknown_init_or_init_option_is_refused_before_any_folder_data_or_model_exists(
    tmp_path, monkeypatch, tiny_overrides, override, said
):
    nothing_may_be_built(monkeypatch)
    overrides = [*tiny_overrides, override]
    if "init_args" in override:
        overrides.append("init=impulse")
    cfg = resolve_config(None, overrides)
    with pytest.raises(ConfigError, match=said.replace("?", r"\?")) as refused:
        train(cfg, tmp_path / "run", progress=False)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("scheme", ["mimetic", "random", "scaled-position"])
def test_an_init_option_a_scheme_does_not_take_is_refused_from_its_signature(scheme):
    with pytest.raises(ConfigError, match=f"^{scheme} init takes no option bogus; it accepts: .*held_out"):
        init_spec(scheme, {"bogus": 1})


def test_every_scheme_that_takes_held_out_is_measured_on_the_images_held_apart(tiny_overrides):
    """The init spec reads `held_out` from each scheme's signature (no hand-kept list of names): every
    scheme that takes it, scaled-position included, measures its held-apart figures on the same images."""
    timm_vit = ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=2", "model_args.embed_dim=32"]
    timm_vit += ["model_args.depth=2", "model_args.num_heads=2", "device=cpu"]
    plan = resolve_plan(resolve_config(None, timm_vit))  # a learned position table: every scheme applies
    data = opening.open_data(plan)
    images = opening.init_images(data)
    for scheme in ("random", "mimetic", "impulse", "scaled-position"):
        assert init_spec(scheme).accepts("held_out")
        model = opening.open_model(plan, opening.source_shape(data))
        report = initialize_model(init_spec(scheme), model, images)
        assert report["real_pass_held_out"]["images"] == len(images) - opening.FITTED, scheme


@pytest.mark.parametrize("layout", ["channels_last=false", "channels_last=true"])
def test_a_run_reopened_at_step_0_holds_the_weights_its_training_started_from(
    tmp_path, tiny_overrides, layout
):
    """`open_run(at="init")` takes the builder's steps in the builder's order (seed, data, model in the
    run's layout, init on the same images): the replayed init is the trained run's start, bit for bit."""
    blend = ["model_args.qk_input=blend", "model_args.alpha=0.5"]
    cfg = resolve_config(None, [*tiny_overrides, "init=impulse", *blend, layout])
    run = build_run(validate(cfg), tmp_path / "run", False, False, DistributedContext())
    started = state_of(run.model)
    reopened = open_run(tmp_path / "run", at="init")
    assert reopened.init_report["real_pass"] == run.model.init_report["real_pass"]
    again = state_of(reopened.model)
    assert started.keys() == again.keys()
    assert all(torch.equal(started[name], again[name]) for name in started)


def test_evaluation_export_and_a_teacher_reopen_a_run_at_the_same_weights(tmp_path, tiny_overrides):
    from convinit.share.export import export_run
    from convinit.train.step_parts import load_teacher
    from convinit.train.trainer import evaluate_run

    trained = train(resolve_config(None, tiny_overrides), tmp_path / "run", progress=False)
    final = state_of(trained.model)
    exported = state_of(export_run(tmp_path / "run"))
    teacher = state_of(load_teacher(str(tmp_path / "run"), 10, torch.device("cpu")))
    for weights in (exported, teacher):
        assert all(torch.equal(final[name], weights[name]) for name in final)
    assert evaluate_run(tmp_path / "run", device="cpu")["test_acc"] == trained.metrics[-1]["test_acc"]


def test_export_and_a_teacher_never_reseed_the_caller_or_change_its_threads(
    tmp_path, monkeypatch, tiny_overrides
):
    """Opening a checkpoint skips step 1: a teacher loaded inside a training run must not reseed that
    run's generators or change its thread count; evaluation and a replayed init take it."""
    from convinit.share.export import export_run
    from convinit.train.step_parts import load_teacher
    from convinit.train.trainer import evaluate_run

    train(resolve_config(None, tiny_overrides), tmp_path / "run", progress=False)
    settled = []
    monkeypatch.setattr(opening, "begin", lambda *args, **kwargs: settled.append(args[1].name))
    export_run(tmp_path / "run")
    load_teacher(str(tmp_path / "run"), 10, torch.device("cpu"))
    assert settled == []
    evaluate_run(tmp_path / "run", device="cpu")
    open_run(tmp_path / "run", at="init")
    assert settled == ["run", "run"]
