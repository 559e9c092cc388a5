"""Mimetic initialisation (docs/method.md §4): Wq Wk^T ~ a1 Z + b1 I, Wv Wproj ~ a2 Z - b2 I."""

from __future__ import annotations

import math

import pytest
import torch

from convinit.init import initialize
from convinit.init.schemes.mimetic import svd_factors
from convinit.models import create_model

D = 64


def full_rank_model(**kwargs):
    """One head of width D, so the rank-d factorisation is exact and the product can be read back."""
    torch.manual_seed(0)
    return create_model("simplevit", num_classes=3, img_size=4, in_chans=1, patch_size=1, dim=D, depth=1,
                        heads=1, dim_head=D, mlp_dim=8, **kwargs)  # fmt: skip


def assert_uniform_with_variance_one_over_d(z: torch.Tensor) -> None:
    bound = math.sqrt(3 / D)
    assert z.abs().max() <= bound * 1.001
    assert z.var().item() == pytest.approx(1 / D, rel=0.1)


def test_query_key_product_is_a1_z_plus_b1_identity():
    model = full_rank_model()
    initialize(model, "mimetic", seed=0)
    attn = model.blocks[0].attn
    wq, wk = attn.to_qk.weight[:D].T.double(), attn.to_qk.weight[D:].T.double()  # (D, d) each
    product = wq @ wk.T
    assert torch.diagonal(product).mean().item() == pytest.approx(0.7, abs=0.03)
    assert_uniform_with_variance_one_over_d((product - 0.7 * torch.eye(D, dtype=torch.float64)) / 0.7)


def test_value_projection_product_is_a2_z_minus_b2_identity():
    model = full_rank_model()
    initialize(model, "mimetic", seed=0)
    attn = model.blocks[0].attn
    product = attn.to_v.weight.T.double() @ attn.to_out.weight.T.double()  # x -> x Wv Wproj
    assert_uniform_with_variance_one_over_d((product + 0.4 * torch.eye(D, dtype=torch.float64)) / 0.4)


def test_constants_are_configurable_and_value_proj_can_be_left_alone():
    model = full_rank_model()
    v = model.blocks[0].attn.to_v.weight.clone()
    report = initialize(model, "mimetic", a1=0.0, b1=2.0, value_proj=False, seed=0)
    attn = model.blocks[0].attn
    product = attn.to_qk.weight[:D].T.double() @ attn.to_qk.weight[D:].double()
    assert torch.allclose(product, 2 * torch.eye(D, dtype=torch.float64), atol=1e-5)
    assert torch.equal(attn.to_v.weight, v) and report["constants"]["b1"] == 2.0


def test_svd_factors_give_the_best_low_rank_approximation():
    matrix = torch.randn(6, 6, dtype=torch.float64)
    left, right = svd_factors(matrix, 2)
    u, s, vh = torch.linalg.svd(matrix)
    assert torch.allclose(left @ right, (u[:, :2] * s[:2]) @ vh[:2])
    assert torch.allclose(left.norm(dim=0), right.norm(dim=1))  # split evenly: U sqrt(S) and sqrt(S) V^T


def test_model_iii_factors_follow_the_recipe_in_token_space():
    torch.manual_seed(0)
    model = create_model("simplevit", num_classes=3, img_size=4, in_chans=1, patch_size=1, dim=32, depth=1,
                         heads=2, dim_head=16, mlp_dim=8, qk_input="free")  # fmt: skip
    initialize(model, "mimetic", seed=0)
    attn = model.blocks[0].attn
    product = attn.q_factors[0].double() @ attn.k_factors[0].double()  # (N, N) with N = r = 16: exact
    assert torch.diagonal(product).mean().item() == pytest.approx(0.7, abs=0.1)


def test_paper1_variant_is_q_k_only_with_noise_variance_one_over_3d():
    model = full_rank_model()
    v, out = model.blocks[0].attn.to_v.weight.clone(), model.blocks[0].attn.to_out.weight.clone()
    report = initialize(model, "mimetic", variant="paper1", seed=0)
    attn = model.blocks[0].attn
    product = attn.to_qk.weight[:D].T.double() @ attn.to_qk.weight[D:].double()  # (D, D): exact at d = D
    noise = (product - 0.7 * torch.eye(D, dtype=torch.float64)) / 0.7  # sqrt(1/D) U(-1, 1)
    assert noise.abs().max() <= math.sqrt(1 / D) * 1.001
    assert noise.var().item() == pytest.approx(1 / (3 * D), rel=0.1)
    assert torch.equal(attn.to_v.weight, v) and torch.equal(attn.to_out.weight, out)
    assert report["variant"] == "paper1" and report["value_proj"] is False


def test_paper1_variant_is_the_rank_d_svd_of_its_definition_per_head():
    torch.manual_seed(0)
    model = create_model("simplevit", num_classes=3, img_size=4, in_chans=1, patch_size=1, dim=32, depth=1,
                         heads=2, dim_head=8, mlp_dim=8)  # fmt: skip
    initialize(model, "mimetic", variant="paper1", seed=5)
    generator = torch.Generator().manual_seed(5)
    noise = 2 * torch.rand(2, 32, 32, generator=generator, dtype=torch.float64) - 1  # all heads at once
    definition = 0.7 * math.sqrt(1 / 32) * noise + 0.7 * torch.eye(32, dtype=torch.float64)
    weight = model.blocks[0].attn.to_qk.weight.double()
    for head in range(2):
        q, k = weight[head * 8 : (head + 1) * 8], weight[16 + head * 8 : 16 + (head + 1) * 8]  # (d, D)
        u, s, vh = torch.linalg.svd(definition[head])
        assert torch.allclose(q.T @ k, (u[:, :8] * s[:8]) @ vh[:8], atol=1e-5)


def test_unknown_mimetic_variant_is_a_config_error():
    from convinit.errors import ConfigError

    with pytest.raises(ConfigError, match="variant must be one of trockman_kolter, paper1"):
        initialize(full_rank_model(), "mimetic", variant="official")
