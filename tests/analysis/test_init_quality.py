"""The init_quality tracker (docs/method.md §3 and §7) against its definitions and the init report."""

from __future__ import annotations

import json

import pytest
import torch

from convinit.analysis import get_tracker
from convinit.analysis.init_quality import init_quality, layer_quality, report_offsets
from convinit.config import resolve_config
from convinit.init import initialize
from convinit.init.attention_sites import attention_slots
from convinit.init.measure import real_pass_quality
from convinit.models import create_model
from convinit.models.filters import impulse_conv_matrix
from convinit.train import train

GRID = (5, 5)


def blend_vit(alpha: float = 0.1):
    torch.manual_seed(0)
    return create_model(
        "simplevit", num_classes=10, img_size=8, in_chans=1, patch_size=1, dim=32, depth=2, heads=4,
        dim_head=8, mlp_dim=64, qk_input="blend", alpha=alpha,
    )  # fmt: skip


def test_exact_impulse_maps_put_all_their_mass_on_target_and_best_offset():
    offsets = [(0, 0), (1, -1), (-2, 2)]
    maps = torch.stack([impulse_conv_matrix(o, GRID) for o in offsets])[None]  # (1, 3, N, N)
    maps = maps + (maps.sum(-1, keepdim=True) == 0) / 25  # rows leaving the grid: uniform
    got = layer_quality(maps, GRID, offsets)
    assert got["target_mass"] == pytest.approx([1.0] * 3)
    assert got["best_offset_mass"] == pytest.approx([1.0] * 3)


def test_uniform_maps_have_entropy_one_and_chance_mass_on_every_offset():
    maps = torch.full((2, 4, 25, 25), 1 / 25)
    got = layer_quality(maps, GRID, [(0, 1)] * 4)
    assert got["entropy"] == pytest.approx([1.0] * 4)
    assert got["best_offset_mass"] == pytest.approx([1 / 25] * 4)
    assert got["target_mass"] == pytest.approx([1 / 25] * 4)


def test_target_mass_equals_the_init_reports_real_pass_mass_on_the_same_images(digits):
    model = blend_vit()
    images = digits.test_images[:32].float() / 255
    report = initialize(model, "impulse", images=images, seed=0)
    got = init_quality(model, images, report_offsets(report))
    expected = real_pass_quality(model, attention_slots(model, "measure"), images, report_offsets(report))
    assert got["init_quality/target_mass"] == pytest.approx(expected["mean_mass"], abs=1e-5)
    assert got["init_quality/entropy"] == pytest.approx(expected["mean_entropy"], abs=1e-5)
    assert got["init_quality/best_offset_mass"] >= got["init_quality/target_mass"] - 1e-6
    assert {f"init_quality/L{layer}/target_mass" for layer in (0, 1)} <= set(got)


def test_random_init_has_no_target_but_a_best_offset_mass():
    got = get_tracker("init_quality")(blend_vit(), torch.rand(8, 1, 8, 8))
    assert "init_quality/target_mass" not in got
    assert 0 < got["init_quality/best_offset_mass"] < 0.5


def test_timm_vit_is_measured_through_its_real_qk_inputs():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=4, in_chans=1, num_classes=3, embed_dim=32, depth=2, num_heads=2
    )
    images = torch.randn(6, 1, 16, 16)
    report = initialize(model, "impulse", images=images, seed=0, sincos_pos_embed=True)
    model.init_report = report
    got = init_quality(model, images)
    expected = real_pass_quality(model, attention_slots(model, "measure"), images, report_offsets(report))
    assert got["init_quality/target_mass"] == pytest.approx(expected["mean_mass"], abs=1e-5)


def test_convit_gpsa_is_measured_on_its_positional_part():
    torch.manual_seed(0)
    model = create_model(
        "convit_tiny_patch4_32", num_classes=5, img_size=24, in_chans=3, patch_size=4, embed_dim=36,
        depth=3, num_heads=4, local_up_to_layer=2,
    )  # fmt: skip
    got = get_tracker("init_quality")(model, torch.randn(2, 3, 24, 24))
    assert {k for k in got if k.count("/") == 2} == {
        f"init_quality/L{layer}/{key}" for layer in (0, 1) for key in ("best_offset_mass", "entropy")
    }
    assert got["init_quality/best_offset_mass"] > 0.2  # a soft 2 x 2 tap per head, not uniform (1/36)


def test_convmixer_is_refused_in_one_line():
    model = create_model("convmixer", num_classes=3, img_size=8, in_chans=1, dim=8, depth=1, patch_size=1)
    with pytest.raises(Exception, match="drop init_quality from track"):
        get_tracker("init_quality")(model, torch.rand(2, 1, 8, 8))


def test_trainer_tracks_every_n_steps_without_changing_the_run(tmp_path, tiny_overrides):
    overrides = tiny_overrides + [
        "epochs=1",
        "init=impulse",
        "model_args.qk_input=blend",
        "deterministic=true",
    ]
    plain = train(resolve_config(None, overrides), run_dir=tmp_path / "plain", progress=False)
    tracked_cfg = resolve_config(
        None, overrides + ["track=[init_quality]", "track_every=4", "logger=[csv,tensorboard]"]
    )
    tracked = train(tracked_cfg, run_dir=tmp_path / "tracked", progress=False)
    rows = [json.loads(line) for line in (tracked.run_dir / "track.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [4, 8]  # 10 steps; the evaluations give steps 0 and 10
    first, last = tracked.metrics[0], tracked.metrics[-1]
    assert first["epoch"] == 0 and "init_quality/target_mass" in first and "init_quality/entropy" in last
    for name, tensor in plain.model.state_dict().items():
        assert torch.equal(tensor, tracked.model.state_dict()[name]), name
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked.run_dir / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("epoch/init_quality/target_mass")] == [0, 1]
    assert [e.step for e in events.Scalars("step/init_quality/L0/entropy")] == [4, 8]
