"""Non-locality and gate trackers (docs/method.md §5) against their definitions."""

from __future__ import annotations

import math

import torch

from convinit.analysis import get_tracker
from convinit.analysis.locality import head_nonlocality, nonlocality, patch_distances
from convinit.models import create_model, record_attention
from convinit.models.convit import gpsa_layers

SMALL = dict(num_classes=5, img_size=24, in_chans=3, patch_size=4, embed_dim=36, depth=4)


def small_model(name: str, heads: int, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return create_model(name, **{**SMALL, "num_heads": heads, **overrides})


def test_patch_distances_are_euclidean_in_patch_units():
    rows, cols = 2, 3
    d = patch_distances(rows, cols)
    for q in range(6):
        for k in range(6):
            expected = math.hypot(q // cols - k // cols, q % cols - k % cols)
            assert math.isclose(d[q, k].item(), expected, rel_tol=1e-6)


def test_nonlocality_of_known_maps():
    n = 9
    identity = torch.eye(n).expand(1, 2, n, n)
    assert torch.allclose(head_nonlocality(identity, (3, 3)), torch.zeros(2))
    uniform = torch.full((1, 1, n, n), 1.0 / n)
    assert torch.allclose(head_nonlocality(uniform, (3, 3)), patch_distances(3, 3).mean().reshape(1))


def test_class_token_rows_and_columns_are_dropped_and_rows_renormalised():
    n = 4  # 2 x 2 grid, class token first
    attn = torch.zeros(1, 1, n + 1, n + 1)
    attn[..., :, 0] = 0.5  # half of every row on the class token
    for q in range(n):
        attn[0, 0, 1 + q, 1 + (q ^ 1)] = 0.5  # the other half on the horizontal neighbour (distance 1)
    assert torch.allclose(head_nonlocality(attn, (2, 2)), torch.ones(1))
    assert torch.allclose(head_nonlocality(attn, (2, 2), renormalise=False), torch.full((1,), 0.5))


def test_tracker_is_the_batch_mean_over_real_forward_passes():
    model = small_model("convit_tiny_patch4_32", 4, local_up_to_layer=2).eval()
    images = torch.randn(5, 3, 24, 24)
    got = nonlocality(model, images, chunk_size=2)
    with torch.no_grad(), record_attention(model) as maps:
        model(images)
    for index, attn in enumerate(maps.values()):
        expected = head_nonlocality(attn, (6, 6))
        assert math.isclose(got[f"nonlocality/L{index}"], expected.mean().item(), rel_tol=1e-5)
        for head in range(4):
            assert math.isclose(got[f"nonlocality/L{index}/H{head}"], expected[head].item(), rel_tol=1e-5)
    assert len([k for k in got if k.count("/") == 1]) == 4


def test_local_convit_at_init_is_more_local_than_a_random_vit():
    images = torch.randn(4, 3, 24, 24)
    convit = get_tracker("nonlocality")(small_model("convit_tiny_patch4_32", 9, local_up_to_layer=3), images)
    deit = get_tracker("nonlocality")(small_model("deit_tiny_patch4_32", 9), images)
    for layer in range(3):  # the GPSA layers
        assert convit[f"nonlocality/L{layer}"] < 0.6 * deit[f"nonlocality/L{layer}"]


def test_tracker_restores_training_mode():
    model = small_model("deit_tiny_patch4_32", 4).train()
    get_tracker("nonlocality")(model, torch.randn(2, 3, 24, 24))
    assert model.training and all(not m.record for m in model.modules() if hasattr(m, "record"))


def test_gates_tracker_reports_sigmoid_lambda_per_gpsa_layer_and_head():
    model = small_model("convit_tiny_patch4_32", 4, local_up_to_layer=2)
    with torch.no_grad():
        gpsa_layers(model)[1].gating_param.copy_(torch.tensor([-1.0, 0.0, 1.0, 2.0]))
    gates = get_tracker("gates")(model, torch.empty(0))
    assert set(gates) == {f"gate/L{layer}/H{head}" for layer in range(2) for head in range(4)}
    assert math.isclose(gates["gate/L0/H0"], 1 / (1 + math.exp(-1)), rel_tol=1e-6)
    assert math.isclose(gates["gate/L1/H0"], 1 / (1 + math.exp(1)), rel_tol=1e-6)
    assert gates["gate/L1/H1"] == 0.5
    assert get_tracker("gates")(small_model("deit_tiny_patch4_32", 4), torch.empty(0)) == {}
