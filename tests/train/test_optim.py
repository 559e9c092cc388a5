"""Optimiser presets and the warm-up + cosine schedule."""

from __future__ import annotations

import pytest
import torch

from convinit.config import TrainConfig, resolve_config
from convinit.errors import ConfigError
from convinit.models import create_model
from convinit.runs.checkpoint import load_weights, save_checkpoint
from convinit.train.optim import build_optimizer, build_scheduler, effective_lr
from convinit.train.validation import validate


def test_adamw_does_not_decay_biases_norms_or_position_embeddings():
    model = create_model("simplevit", num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=32, depth=1)
    model.pos_embed = torch.nn.Parameter(torch.zeros(1, 16, 32))
    optimizer = build_optimizer(model, TrainConfig(optimizer="adamw", weight_decay=0.05))
    decayed = {id(p) for p in optimizer.param_groups[0]["params"]}
    for name, param in model.named_parameters():
        expected = param.ndim > 1 and "pos_embed" not in name
        assert (id(param) in decayed) == expected, name
    assert optimizer.param_groups[1]["weight_decay"] == 0.0


def test_lr_scales_with_batch_when_a_base_batch_is_set():
    assert effective_lr(TrainConfig(lr=5e-4, batch_size=256, lr_base_batch=512)) == pytest.approx(2.5e-4)
    assert effective_lr(TrainConfig(lr=5e-4, batch_size=256)) == pytest.approx(5e-4)


def test_schedule_warms_up_linearly_then_follows_cosine_to_min_lr():
    param = torch.nn.Parameter(torch.zeros(1))
    cfg = TrainConfig(lr=1.0, epochs=10, warmup_epochs=2, min_lr=0.1)
    optimizer = torch.optim.SGD([param], lr=cfg.lr)
    scheduler = build_scheduler(optimizer, cfg, steps_per_epoch=5)  # 10 warm-up steps, 40 cosine steps
    lrs = []
    for _ in range(50):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10], strict=True))
    import math

    for t in (0, 20, 39):
        assert lrs[10 + t] == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi * t / 40)) / 2)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_optimizers_use_the_fused_kernel_and_step_like_the_reference_loop(name):
    torch.manual_seed(0)
    shape = dict(num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=32, depth=1)
    model, reference = create_model("simplevit", **shape), create_model("simplevit", **shape)
    reference.load_state_dict(model.state_dict())
    cfg = TrainConfig(optimizer=name, lr=1e-2, weight_decay=0.05)
    fused = build_optimizer(model, cfg)
    assert fused.defaults["fused"] is True
    loop = build_optimizer(reference, cfg)
    for group in loop.param_groups:  # the same groups and hyper-parameters, stepped by the per-tensor loop
        group["fused"], group["foreach"] = False, False
    images = torch.randn(4, 1, 8, 8)
    for _ in range(3):
        for net, optimizer in ((model, fused), (reference, loop)):
            optimizer.zero_grad()
            net(images).square().mean().backward()
            optimizer.step()
    for (name_, a), b in zip(model.state_dict().items(), reference.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name_)


def blend_vit(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    shape = dict(num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=32, depth=2)
    return create_model(
        "simplevit", qk_input="blend", alpha=0.5, content_warmup=10, content_projection=True, **shape
    )


def test_content_warmup_advances_once_per_optimizer_step_and_a_checkpoint_restores_it_exactly(tmp_path):
    model = blend_vit(0)
    optimizer = build_optimizer(model, TrainConfig(optimizer="adamw"))  # starts the model's schedule
    assert float(model.content_steps) == 0.0
    for _ in range(3):
        model(torch.randn(4, 1, 8, 8)).sum().backward()
        optimizer.step()
    assert float(model.content_steps) == 3.0
    saved = {k: v.clone() for k, v in model.state_dict().items() if "content" in k}
    assert len(saved) == 3  # the step count and one projector per block
    path = save_checkpoint(tmp_path, model, {}, epoch=1)
    resumed = blend_vit(1)  # another init: its projectors and ramp differ until the checkpoint loads
    build_optimizer(resumed, TrainConfig(optimizer="adamw"))  # as a resume builds it, before loading
    load_weights(resumed, path)
    for key, value in saved.items():
        assert torch.equal(resumed.state_dict()[key], value), key


def test_qk_pull_adds_strength_times_the_distance_from_the_anchor_to_the_q_k_gradient_only():
    model = blend_vit(0)
    optimizer = build_optimizer(model, TrainConfig(optimizer="adamw", qk_pull=0.5))
    qk = [block.attn.to_qk.weight for block in model.blocks]
    anchors = [w.detach().clone() for w in qk]
    with torch.no_grad():
        for w in qk:
            w.add_(torch.randn_like(w))
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    seen = {}  # what the optimiser steps with: each parameter and its gradient after the pull's pre-hook

    def record(*_):
        seen.update({id(p): (p.detach().clone(), p.grad.clone()) for p in model.parameters()})

    optimizer.register_step_pre_hook(record)
    optimizer.step()
    for w, w0 in zip(qk, anchors, strict=True):
        value, grad = seen[id(w)]
        assert torch.allclose(grad, 0.5 * (value - w0), atol=1e-6)
    others = [p for p in model.parameters() if all(p is not w for w in qk)]
    assert all(torch.equal(seen[id(p)][1], torch.zeros_like(p)) for p in others)


def test_qk_pull_anchor_is_restored_bit_exactly_from_the_optimizer_state(tmp_path):
    model = blend_vit(0)
    optimizer = build_optimizer(model, TrainConfig(optimizer="adam", qk_pull=1.0))
    saved = [a.clone() for a in optimizer.param_groups[-1]["pull_anchor"]]
    torch.save(optimizer.state_dict(), tmp_path / "state.pt")
    resumed = build_optimizer(blend_vit(1), TrainConfig(optimizer="adam", qk_pull=1.0))  # other weights
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    restored = resumed.param_groups[-1]["pull_anchor"]
    assert len(restored) == 2 and all(torch.equal(a, b) for a, b in zip(saved, restored, strict=True))


def test_qk_pull_is_refused_in_one_line_on_a_model_without_q_k_weights():
    cfg = resolve_config("paper1/convmixer_small", ["qk_pull=0.1"])
    with pytest.raises(
        ConfigError, match="qk_pull needs a model whose attention has a Q/K projection"
    ) as info:
        validate(cfg)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="'qk_pull' must not be negative"):
        resolve_config(None, ["qk_pull=-1"])


def test_qk_pull_on_frozen_attention_is_refused_because_it_would_pull_nothing():
    """freeze_attention keeps the Q/K weights at their start: the pull's anchor; a pull there is a no-op
    that used to pass silently."""
    cfg = resolve_config(None, ["qk_pull=1.0", "model_args.freeze_attention=true", "device=cpu"])
    with pytest.raises(ConfigError, match="but this model's are frozen") as info:
        validate(cfg)
    assert "\n" not in str(info.value)
