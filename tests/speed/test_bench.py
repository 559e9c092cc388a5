"""`convinit bench`: what it measures, how it counts FLOPs, and that bad options stop before any work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from convinit.cli import main
from convinit.speed.models import (
    BENCH_MODELS,
    SAME_SHAPE_VIT,
    BenchModel,
    StepSetup,
    count_train_flops,
    grouped_conv_backward_flop,
    train_flops,
)
from convinit.speed.run import ratios
from convinit.speed.timing import interleaved_medians

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--batch-size", "2", "--repeats", "1", "--warmup", "0"]


def test_interleaved_timing_runs_warmup_then_rounds_in_turn():
    calls = []
    cases = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timing = interleaved_medians(cases, torch.device("cpu"), warmup=1, repeats=3)
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert set(timing) == {"a", "b"}
    assert all(t["min"] <= t["median"] <= t["max"] for t in timing.values())


def conv_backward_flops(groups: int, mapping: dict) -> tuple[int, int]:
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=groups)
    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        conv(x).sum().backward()
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    return counts["aten.convolution"], counts["aten.convolution_backward"]


def test_conv_backward_flops_equal_torch_for_dense_convs_and_twice_the_forward_for_depthwise():
    ours = {torch.ops.aten.convolution_backward: grouped_conv_backward_flop}
    assert conv_backward_flops(1, ours) == conv_backward_flops(1, {})
    forward, backward = conv_backward_flops(8, ours)
    assert forward == 2 * 2 * 8 * 3 * 3 * 6 * 6  # 2 * batch * C_out * (C_in / groups) * k * k * H * W
    assert backward == 2 * forward  # the input and the weight gradient each cost one forward
    assert conv_backward_flops(8, {})[1] > 4 * backward  # torch's formula ignores groups here


def test_train_flops_of_an_mlp_match_the_matmul_count():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16), nn.ReLU(), nn.Linear(16, 10))
    flops = train_flops(lambda: model, StepSetup(4, torch.device("cpu"), None))
    first, second = 3 * 32 * 32 * 16, 16 * 10
    # forward 2*B*(first + second); backward: weight gradients of both, input gradient of the second only
    assert flops == 2 * 4 * (2 * first + 3 * second)


def test_train_flops_extended_from_batches_1_and_2_equal_a_direct_count():
    spec = BENCH_MODELS["convit_tiny_patch2_32"]
    kwargs = {"depth": 3, "local_up_to_layer": 2, "embed_dim": 32}
    setup = StepSetup(5, torch.device("cpu"), None)
    build = lambda: BenchModel(spec.name, kwargs).build()  # noqa: E731
    assert train_flops(build, setup) == count_train_flops(build(), setup)


def test_same_shape_vit_differs_from_convit_only_in_gpsa():
    convit = BENCH_MODELS["convit_tiny_patch2_32"].build()
    vit = BenchModel("convit_tiny_patch2_32", SAME_SHAPE_VIT["convit_tiny_patch2_32"]).build()
    gpsa_only = ("pos_proj", "gating_param", "attn.qk.", "attn.v.")

    def shapes(model: nn.Module) -> dict[str, torch.Size]:
        return {n: p.shape for n, p in model.named_parameters() if not any(k in n for k in gpsa_only)}

    convit_shapes, vit_shapes = shapes(convit), shapes(vit)
    assert {n: s for n, s in vit_shapes.items() if n in convit_shapes} == convit_shapes
    assert len(vit.blocks) == len(convit.blocks)


def test_bench_json_has_every_figure_the_benchmarks_page_quotes(capsys, tmp_path):
    out = tmp_path / "bench.json"
    argv = ["bench", "--models", "simplevit", *TINY, "--stream-workers", "0", "--json", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == result
    rows = {row["row"]: row for row in result["models"]}
    assert set(rows) == {"convinit", "timm"}
    for row in rows.values():
        assert row["train_images_per_s"] > 0 and row["infer_images_per_s"] > 0
        assert row["train_gflop_per_image"] > 0 and 0 < row["matmul_fraction"]
        assert row["matmul_fraction"] == pytest.approx(
            row["achieved_tflop_per_s"] / row["matmul_tflop_per_s"]
        )
    # the two are the same shape, so the same matmuls (timm's sequential MLP is the same size)
    ours, timms = rows["convinit"]["train_gflop_per_image"], rows["timm"]["train_gflop_per_image"]
    assert ours == pytest.approx(timms, rel=0.02)
    assert {"simplevit: train convinit/timm", "simplevit: data pipeline/train"} <= set(result["ratios"])
    assert result["pipeline"]["images_per_s"] > 0
    assert result["stream"]["images_per_s"]["0"] > 0 and result["stream"]["img_size"] == 224
    assert result["impulse_init"]["closed_form"]["mean_mass"] > 0.7  # pseudo-input; the default aims at 0.8
    fitted = result["impulse_init"]["closed_form_images"]  # fitted on 64 real images
    assert fitted["images"] == 64 and fitted["held_out_mass"] > 0.6 and fitted["seconds"] > 0
    assert result["gpsa"]["gpsa_ms"] > 0 and result["matmul"]["tflop_per_s"] > 0
    assert result["machine"]["torch"] == torch.__version__


def test_ratios_compare_the_compiled_row_when_only_compiled_convinit_was_measured():
    def row(label: str, train: float) -> dict:
        return {"model": "m", "row": label, "train_images_per_s": train, "infer_images_per_s": 2 * train}

    both = ratios([row("convinit", 10.0), row("convinit compiled", 12.0), row("timm", 8.0)], None)
    assert both == {
        "m: train convinit/timm": 1.25,
        "m: infer convinit/timm": 1.25,
        "m: train compiled/eager": 1.2,
    }
    compiled_only = ratios([row("convinit compiled", 12.0), row("timm", 8.0)], {"images_per_s": 120.0})
    assert compiled_only == {
        "m: train convinit/timm": 1.5,
        "m: infer convinit/timm": 1.5,
        "m: data pipeline/train": 10.0,
    }


def test_bench_table_and_one_epoch_on_device_resident_data(capsys):
    argv = ["bench", "--models", "convmixer", *TINY, "--no-timm", "--no-pipeline", "--no-costs"]
    assert main([*argv, "--channels-last", "--epoch", "--epoch-images", "6"]) == 0
    table = capsys.readouterr().out
    assert "convmixer" in table and "one 6-image epoch, convmixer (convinit)" in table


def test_bench_without_timm_installed_measures_convinit_and_says_how_to_add_timm(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    argv = ["bench", "--models", "convmixer", *TINY, "--no-pipeline", "--no-costs"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "convmixer" in table and "timm " not in table.split("ratios")[0]
    assert 'note: timm is not installed, so there are no timm rows: pip install "convinit[timm]"' in table


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "nope"], "cannot benchmark 'nope'; choose from vit_tiny_patch2_32"),
        (["--models", "deit_tiny"], "(it is a model, but has no benchmark twin)"),
        (["--precision", "fp8"], "precision must be one of fp32, bf16, fp16"),
        (["--compile", "maybe"], "compile must be one of off, on, both"),
        (["--repeats", "0"], "repeats must be >= 1"),
        (["--device", "cuda:7"], "cuda"),
    ],
)
def test_bad_bench_options_stop_with_one_line_and_exit_2(argv, message, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and message in err and err.count("\n") == 1
