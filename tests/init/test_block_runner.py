"""The block-by-block runner the fit and the real-pass report use, against one plain forward pass."""

from __future__ import annotations

import pytest
import torch

from convinit.init import initialize
from convinit.init.attention_sites import attention_slots
from convinit.init.block_runner import BlockRunner
from convinit.init.measure import layer_maps, map_statistics, qk_inputs
from convinit.init.targets import Targets
from convinit.models import create_model

SMALL = dict(img_size=8, in_chans=1, patch_size=2, dim=32, depth=3, heads=2, dim_head=16, mlp_dim=64)


def small_models():
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    yield create_model("simplevit", num_classes=10, qk_input="blend", alpha=0.3, **SMALL)
    yield create_model("simplevit", num_classes=10, qk_input="x", **SMALL)
    yield VisionTransformer(
        img_size=8, patch_size=2, in_chans=1, embed_dim=32, depth=3, num_heads=2, num_classes=10
    )


@pytest.mark.parametrize("model", list(small_models()), ids=["blend", "x", "timm"])
def test_block_runner_gives_each_layer_the_q_k_input_of_a_plain_forward_pass(model):
    images = torch.randn(5, 1, 8, 8)
    slots = attention_slots(model, "measure")
    expected = qk_inputs(model.train(), slots, images)
    with BlockRunner(model, slots, images) as runner:
        for index in range(len(slots)):
            torch.testing.assert_close(runner.qk_input(index), expected[index], rtol=0, atol=1e-6)
            runner.advance(index)
    assert model.training  # the runner restores the model's mode


def test_float32_real_pass_maps_agree_with_float64_to_1e4():
    torch.manual_seed(0)
    model = create_model("simplevit", num_classes=10, qk_input="x", **SMALL)
    images = torch.randn(16, 1, 8, 8)
    report = initialize(model, "impulse", images=images, seed=0)
    slots = attention_slots(model, "impulse")
    for slot, x, layer in zip(slots, qk_inputs(model, slots, images), report["layers"], strict=True):
        targets = Targets.build([tuple(h["offset"]) for h in layer["heads"]], slot.grid)
        single = map_statistics(layer_maps(slot, x.float()), targets, slot.grid)
        double = map_statistics(layer_maps(slot, x.double()), targets, slot.grid)
        for key in single:
            assert single[key] == pytest.approx(double[key], abs=1e-4)
