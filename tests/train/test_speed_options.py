"""Speed options of the trainer: precision=fp16/bf16, compile=true, channels_last=true.

Each is checked against the plain fp32, eager, contiguous run it replaces (same seed, same data order):
the option may change the speed and the rounding, never what is trained.
"""

from __future__ import annotations

import functools
import signal
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image
from safetensors.torch import load_file
from torch._dynamo.utils import counters

from convinit.config import resolve_config
from convinit.data import BatchAugment, MixupCutmix
from convinit.errors import ConfigError, TrainingDiverged
from convinit.models import layers
from convinit.runs.checkpoint import list_checkpoints, load_train_state
from convinit.runs.signals import RunInterrupted
from convinit.train import evaluate_run, train
from convinit.train.plan import ModelSpec, resolve_plan
from convinit.train.run_builder import check_forward

VOLATILE = {"seconds", "images_per_s"}


def stable(rows):
    return [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]


def final_scaler_state(run_dir):
    return load_train_state(list_checkpoints(run_dir)[-1])["scaler"]


@pytest.fixture
def high_initial_fp16_scale(monkeypatch):
    """GradScaler starting at 2**24 instead of 2**16: on this tiny ViT the first 6 fp16 steps overflow
    (the gradient of the logits alone is ~2**24 / batch > 65504), so the scale changes within an epoch."""
    scale = 2.0**24
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=scale))
    return scale


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_low_precision_training_ends_close_to_fp32(tmp_path, tiny_overrides, precision):
    # 2 epochs of 20 steps take the test loss from 2.30 to 2.13 (accuracy ~37 %); bf16 and fp16 runs end
    # within 3e-4 of that loss and 0.2 points of that accuracy here, so 0.01 and 2 points leave room
    overrides = tiny_overrides + ["batch_size=50", "lr=3e-3", "eval_every=0"]
    reference = train(resolve_config(None, overrides), run_dir=tmp_path / "fp32", progress=False)
    low = train(
        resolve_config(None, overrides + [f"precision={precision}"]),
        run_dir=tmp_path / precision,
        progress=False,
    )
    ref, got = reference.metrics[-1], low.metrics[-1]
    assert ref["test_acc"] > 25.0  # it learned: the tolerances below are small next to the change
    for key in ("train_loss", "test_loss"):
        assert got[key] == pytest.approx(ref[key], abs=0.01), key
    for key in ("train_acc", "test_acc"):
        assert got[key] == pytest.approx(ref[key], abs=2.0), key
    # `convinit eval` evaluates in the run's precision too: it reproduces the run's own figures
    assert evaluate_run(low.run_dir, device="cpu")["test_loss"] == pytest.approx(got["test_loss"], abs=1e-6)


def test_fp16_gradient_overflow_is_skipped_by_the_scaler_not_reported_as_divergence(
    tmp_path, tiny_overrides, high_initial_fp16_scale
):
    overrides = tiny_overrides + ["precision=fp16", "on_nonfinite=stop", "epochs=1", "eval_every=0"]
    run = train(resolve_config(None, overrides), run_dir=tmp_path / "run", progress=False)
    scaler = final_scaler_state(run.run_dir)
    assert scaler["scale"] < high_initial_fp16_scale  # steps overflowed, the scaler skipped them
    assert scaler["_growth_tracker"] > 0  # and the later steps were taken
    assert all(torch.isfinite(p).all() for p in run.model.parameters())


def test_fp16_nonfinite_loss_still_stops_the_run(tmp_path, tiny_overrides):
    cfg = resolve_config(None, tiny_overrides + ["precision=fp16", "lr=1e30", "optimizer=sgd"])
    with pytest.raises(TrainingDiverged, match="non-finite loss"):
        train(cfg, run_dir=tmp_path / "run", progress=False)


def test_fp16_checkpoint_holds_the_scaler_and_a_resumed_run_equals_an_uninterrupted_one(
    tmp_path, tiny_overrides, monkeypatch, high_initial_fp16_scale
):
    # interrupted at step 4 while the scale falls from 2**24 (steps 1-6 overflow): a resume that restarted
    # the scaler would skip other steps and end with other weights
    overrides = tiny_overrides + ["epochs=1", "eval_every=0", "deterministic=true", "precision=fp16"]
    reference = train(resolve_config(None, overrides), run_dir=tmp_path / "reference", progress=False)
    assert final_scaler_state(reference.run_dir)["scale"] < high_initial_fp16_scale

    calls = {"n": 0}
    original = MixupCutmix.__call__

    def ctrl_c_during_step_four(self, images, labels):
        calls["n"] += 1
        if calls["n"] == 4:
            signal.raise_signal(signal.SIGINT)
        return original(self, images, labels)

    monkeypatch.setattr(MixupCutmix, "__call__", ctrl_c_during_step_four)
    with pytest.raises(RunInterrupted) as info:
        train(resolve_config(None, overrides), run_dir=tmp_path / "resumed", progress=False)
    assert info.value.checkpoint.name == "epoch-0000-step-000004"
    saved = load_train_state(info.value.checkpoint)["scaler"]
    assert saved["scale"] == high_initial_fp16_scale / 2**4  # halved at each of the 4 steps so far
    monkeypatch.setattr(MixupCutmix, "__call__", original)
    resumed = train(run_dir=tmp_path / "resumed", resume=True, progress=False)

    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    assert stable(resumed.metrics) == stable(reference.metrics)
    assert final_scaler_state(resumed.run_dir) == final_scaler_state(reference.run_dir)


@pytest.fixture
def fresh_dynamo():
    """Compiled graphs are cached per forward function: each compile test starts and ends without them."""
    torch.compiler.reset()
    counters.clear()
    yield
    torch.compiler.reset()


# the smallest run that compiles a forward and a backward: depth 1, 5 steps, evaluated only at the end
SMALLEST_COMPILED_RUN = ["model_args.depth=1", "epochs=1", "per_class=5", "batch_size=10", "eval_every=0"]


def test_compiled_training_matches_eager_and_saves_keys_without_orig_mod(
    tmp_path, tiny_overrides, digits, fresh_dynamo
):
    # compiling takes ~40 s on 2 cores with an empty inductor cache, a few seconds with a warm one
    overrides = tiny_overrides + SMALLEST_COMPILED_RUN + ["ema_decay=0.9"]
    eager = train(resolve_config(None, overrides), run_dir=tmp_path / "eager", progress=False)
    assert counters["stats"]["unique_graphs"] == 0
    compiled = train(
        resolve_config(None, overrides + ["compile=true"]), run_dir=tmp_path / "compiled", progress=False
    )

    assert counters["stats"]["unique_graphs"] >= 1  # the training step did go through torch.compile
    assert not isinstance(compiled.model, torch._dynamo.eval_frame.OptimizedModule)
    for name in ("model.safetensors", "ema.safetensors"):
        keys = set(load_file(list_checkpoints(compiled.run_dir)[-1] / name))
        assert keys == set(load_file(list_checkpoints(eager.run_dir)[-1] / name)), name
        assert not any("_orig_mod" in key for key in keys), name
    # inductor fuses and reorders float32 arithmetic: equal up to rounding (measured ~6e-7 here)
    images = BatchAugment(digits.mean, digits.std)(digits.test_images[:100])
    with torch.no_grad():
        logits_eager, logits_compiled = eager.model.eval()(images), compiled.model.eval()(images)
    torch.testing.assert_close(logits_compiled, logits_eager, atol=1e-4, rtol=1e-4)
    assert compiled.metrics[-1]["test_loss"] == pytest.approx(eager.metrics[-1]["test_loss"], abs=1e-4)


def test_compile_failure_is_a_one_line_config_error_naming_compile_false(
    tmp_path, tiny_overrides, fresh_dynamo
):
    overrides = tiny_overrides + SMALLEST_COMPILED_RUN + ["compile=true"]
    with torch._inductor.config.patch({"cpp.cxx": ("/nonexistent/c++",)}):  # a machine without a compiler
        with pytest.raises(ConfigError) as info:
            train(resolve_config(None, overrides), run_dir=tmp_path / "run", progress=False)
    message = str(info.value)
    assert "torch.compile failed" in message and "compile=false" in message and "\n" not in message


def write_rgb_folder(root, per_class: int = 30, size: int = 8) -> None:
    """Two classes of noisy 8 x 8 RGB images, reddish or bluish: 3 channels, so that the default and the
    channels_last layouts differ (on 1-channel digits the two coincide and torch picks either)."""
    rng = np.random.default_rng(0)
    for label, name in enumerate(["red", "blue"]):
        for i in range(per_class):
            pixels = rng.integers(0, 160, (size, size, 3), dtype=np.uint8)
            pixels[..., 2 * label] += 90
            split = "test" if i % 5 == 0 else "train"
            path = root / split / name / f"{i:03d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels, "RGB").save(path)


def test_channels_last_convmixer_trains_like_the_default_layout(tmp_path, monkeypatch):
    write_rgb_folder(tmp_path / "data")
    layouts: list[bool] = []
    original = ModelSpec.build

    def record_stem_layout(spec):
        model = original(spec)
        model.stem.register_forward_hook(
            lambda module, inputs, out: layouts.append(out.is_contiguous(memory_format=torch.channels_last))
        )
        return model

    monkeypatch.setattr(ModelSpec, "build", record_stem_layout)
    overrides = [
        "dataset=folder",
        f"data_dir={tmp_path / 'data'}",
        "epochs=2",
        "batch_size=12",
        # standard block: in paper 1's (no GELU) the conv bias feeds BN directly, gets only rounding-noise
        # gradients, and Adam turns those into layout-dependent steps
        "model_args={dim: 16, depth: 2, kernel_size: 3, patch_size: 2, spatial: learned, block: standard}",
        "warmup_epochs=0",
        "lr=3e-3",
        "device=cpu",
    ]
    runs = {}
    for channels_last in (False, True):
        layouts.clear()
        cfg = resolve_config("paper1/convmixer_small", overrides + [f"channels_last={channels_last}"])
        runs[channels_last] = train(cfg, run_dir=tmp_path / str(channels_last), progress=False)
        # check_forward, every training step and every evaluation ran in the asked-for layout
        assert layouts and set(layouts) == {channels_last}

    plain, last = runs[False], runs[True]
    assert last.model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    # the same arithmetic in another order: equal up to float32 rounding
    for name, tensor in plain.model.state_dict().items():
        torch.testing.assert_close(last.model.state_dict()[name], tensor, atol=1e-5, rtol=1e-5, msg=name)
    for key in ("train_loss", "test_loss"):
        assert last.metrics[-1][key] == pytest.approx(plain.metrics[-1][key], abs=1e-5), key


def test_model_without_a_kernel_for_the_autocast_dtype_is_told_to_use_fp32(tiny_overrides):
    class NoHalfMatmul(nn.Module):  # what an op without a float16 CPU kernel raises
        def forward(self, images):
            if torch.is_autocast_enabled("cpu"):
                raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")
            return images.flatten(1)[:, :10]

    cfg = resolve_config(None, tiny_overrides + ["precision=fp16"])
    with pytest.raises(ConfigError) as info:
        check_forward(resolve_plan(cfg), NoHalfMatmul(), torch.randn(2, 1, 8, 8), num_classes=10)
    message = str(info.value)
    assert "not under precision=fp16 autocast on cpu" in message and "use precision=fp32" in message
    assert "\n" not in message


def new_backends() -> SimpleNamespace:
    """`torch.backends` as torch 2.9 and later shape it: `fp32_precision` on matmul and cudnn.conv."""
    return SimpleNamespace(
        cuda=SimpleNamespace(matmul=SimpleNamespace(fp32_precision="ieee")),
        cudnn=SimpleNamespace(conv=SimpleNamespace(fp32_precision="ieee"), benchmark=False),
    )


def old_backends() -> SimpleNamespace:
    """`torch.backends` before 2.9: the `allow_tf32` flags, no `fp32_precision`, no cudnn.conv."""
    return SimpleNamespace(
        cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)),
        cudnn=SimpleNamespace(allow_tf32=False, benchmark=False),
    )


def tf32_state(backends: SimpleNamespace) -> tuple[str, bool]:
    if hasattr(backends.cudnn, "conv"):
        precision = backends.cuda.matmul.fp32_precision
        assert backends.cudnn.conv.fp32_precision == precision
    else:
        precision = "tf32" if backends.cuda.matmul.allow_tf32 else "ieee"
        assert backends.cudnn.allow_tf32 == (precision == "tf32")
    return precision, backends.cudnn.benchmark


@pytest.mark.parametrize("api", [new_backends, old_backends], ids=["fp32_precision", "allow_tf32"])
@pytest.mark.parametrize(
    ("precision", "deterministic", "expected"),
    [("auto", False, ("tf32", True)), ("tf32", False, ("tf32", True)), ("fp32", False, ("ieee", True)),
     ("bf16", True, ("tf32", False))],
)  # fmt: skip
def test_cuda_uses_tf32_and_cudnn_benchmark_unless_fp32_or_deterministic_asks_otherwise(
    precision, deterministic, expected, api
):
    """On either of torch's TF32 APIs (before 2.9 an `fp32_precision` write raised AttributeError)."""
    from convinit.train.process import autocast_dtype, configure_cuda_math

    backends = api()
    cfg = resolve_config(None, [f"precision={precision}", f"deterministic={str(deterministic).lower()}"])
    configure_cuda_math(cfg, torch.device("cpu"), backends)  # nothing changes off CUDA
    assert tf32_state(backends) == ("ieee", False)
    configure_cuda_math(cfg, torch.device("cuda"), backends)
    assert tf32_state(backends) == expected
    if precision in ("tf32", "fp32"):
        assert autocast_dtype(cfg, torch.device("cuda")) is None  # both keep fp32 tensors


def test_this_torchs_own_tf32_api_takes_the_setting():
    """The real `torch.backends` of the installed torch, whichever API it has; flags restored by hand
    (pytest's monkeypatch deletes attributes torch serves through `__getattr__` at teardown)."""
    from convinit.train.process import set_tf32

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    new = hasattr(matmul, "fp32_precision")
    read = (
        (lambda: (matmul.fp32_precision, cudnn.conv.fp32_precision))
        if new
        else (lambda: (matmul.allow_tf32, cudnn.allow_tf32))
    )
    saved = read()
    try:
        set_tf32(torch.backends, True)
        assert read() == (("tf32", "tf32") if new else (True, True))
        set_tf32(torch.backends, False)
        assert read() == (("ieee", "ieee") if new else (False, False))
    finally:
        if new:
            matmul.fp32_precision, cudnn.conv.fp32_precision = saved
        else:
            matmul.allow_tf32, cudnn.allow_tf32 = saved


def test_attention_kernel_small_heads_runs_every_step_and_evaluation_and_trains_like_sdpa(
    tmp_path, tiny_overrides, monkeypatch
):
    calls = {"training": 0, "evaluating": 0}
    original = layers.small_head_attention

    def counted(q, k, v, scale):
        calls["training" if torch.is_grad_enabled() else "evaluating"] += 1
        return original(q, k, v, scale)

    monkeypatch.setattr(layers, "small_head_attention", counted)
    many_heads = tiny_overrides + ["model_args.heads=8", "model_args.dim_head=4", "lr=3e-3"]
    plain = train(resolve_config(None, many_heads), run_dir=tmp_path / "sdpa", progress=False)
    assert calls == {"training": 0, "evaluating": 0}  # the default is torch's SDPA, as before
    fused = train(
        resolve_config(None, many_heads + ["attention_kernel=small_heads"]),
        run_dir=tmp_path / "kernel",
        progress=False,
    )
    # 2 layers in each of 20 training steps; every evaluation (step 0 and 2 epochs) and the forward check
    assert calls["training"] == 2 * 20 and calls["evaluating"] > 0
    # exact to float rounding, not bit for bit: the same training
    for name, tensor in plain.model.state_dict().items():
        torch.testing.assert_close(fused.model.state_dict()[name], tensor, atol=1e-4, rtol=1e-4, msg=name)
    for key in ("train_loss", "test_loss"):
        assert fused.metrics[-1][key] == pytest.approx(plain.metrics[-1][key], abs=1e-4), key
    assert evaluate_run(tmp_path / "kernel")["test_loss"] == pytest.approx(
        fused.metrics[-1]["test_loss"], abs=1e-6
    )


@pytest.mark.parametrize(
    "preset, overrides, says",
    [
        (None, [], "runs no layer of simplevit"),  # heads of dim 16: torch's kernel is the faster there
        (None, ["model_args.heads=8", "model_args.dim_head=4", "precision=bf16"], "has precision=bf16"),
        ("paper1/convmixer_small", ["epochs=1"], "runs no layer of convmixer"),
    ],
)
def test_attention_kernel_small_heads_is_refused_where_it_would_run_nothing_before_the_folder_exists(
    tmp_path, tiny_overrides, preset, overrides, says
):
    base = [] if preset else tiny_overrides
    cfg = resolve_config(preset, base + overrides + ["device=cpu", "attention_kernel=small_heads"])
    with pytest.raises(ConfigError, match=says) as refused:
        train(cfg, run_dir=tmp_path / "run", progress=False)
    assert "use attention_kernel=sdpa" in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()
