"""Paper 1's optimiser recipe against a literal transcription of the official `impulse_init`
(docs/method.md §3)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.optim as optim

from convinit.init import initialize
from convinit.models import create_model


def official_impulse_init(heads, img_size, att_rank, ff, scale, spatial_pe, norm, num_epoch):
    """docs/method.md §3's description of the official function, line by line (CPU; steps as an argument)."""
    weight = torch.zeros((heads, img_size**2, img_size**2))
    k = torch.randint(0, ff**2, (heads,))
    for i in range(heads):
        m = (k[i] // ff) - (ff // 2)
        n = (k[i] % ff) - (ff // 2)
        tmp_weight = torch.zeros((img_size, img_size))
        for j in range(0 - min(0, n), img_size - max(0, n)):
            tmp_weight[j, j + n] = 1
        for j in range(0 - min(0, m), img_size - max(0, m)):
            weight[i, j * img_size : (j + 1) * img_size, (j + m) * img_size : (j + m + 1) * img_size] = (
                tmp_weight
            )
    weights_q = np.sqrt(1 / att_rank / heads) * (2 * torch.rand(heads, spatial_pe.shape[1], att_rank) - 1)
    weights_k = np.sqrt(1 / att_rank / heads) * (2 * torch.rand(heads, att_rank, spatial_pe.shape[1]) - 1)
    weights_q, weights_k = nn.Parameter(weights_q), nn.Parameter(weights_k)
    nq = weights_q.detach().cpu().norm(dim=(1)).mean()
    criterion = nn.MSELoss()
    optimizer = optim.Adam([weights_q, weights_k], lr=0.0001)
    for i in range(num_epoch):
        if i % norm == 0:
            with torch.no_grad():
                weights_q.div_(weights_q.detach().norm(dim=(1), keepdim=True) / nq)
                weights_k.div_(weights_k.detach().norm(dim=(1), keepdim=True) / nq)
        optimizer.zero_grad()
        outputs = torch.softmax((spatial_pe @ weights_q @ weights_k @ (spatial_pe.T)) * scale, -1)
        loss = criterion(outputs, weight)
        loss.backward()
        optimizer.step()
    return weights_q.detach().cpu(), weights_k.detach().cpu()


def test_optimize_solver_gives_the_official_functions_weights_with_the_same_seed():
    # 6x6 grid, D 32, 2 heads of rank 8, 5x5 taps, scale 0.1, renormalising every 100 of 250 steps
    model = create_model("simplevit", img_size=6, in_chans=1, patch_size=1, dim=32, depth=1, heads=2,
                         dim_head=8, mlp_dim=16, qk_input="blend", alpha=0.0)  # fmt: skip
    torch.manual_seed(42)
    report = initialize(model, "impulse", solver="optimize", steps=250, renorm_every=100, kernel_size=5)
    torch.manual_seed(42)
    wq, wk = official_impulse_init(2, 6, 8, 5, 0.1, model.pos_embedding, norm=100, num_epoch=250)
    factor = math.sqrt(0.1 / model.blocks[0].attn.scale)  # the layer's own scale reproduces the fitted map
    qk = model.blocks[0].attn.to_qk.weight.detach()  # (2 * H*d, D): q rows, then k rows
    assert torch.allclose(qk[:16], (wq.permute(0, 2, 1).reshape(16, 32)) * factor, atol=1e-6)
    assert torch.allclose(qk[16:], (wk.reshape(16, 32)) * factor, atol=1e-6)
    assert [tuple(h["offset"]) for h in report["layers"][0]["heads"]] == [
        tuple(o) for o in report_offsets_from_seed(42, 2, 5)
    ]


def report_offsets_from_seed(seed: int, heads: int, ff: int) -> list[tuple[int, int]]:
    """The official draw of tap indices turned into (dy, dx) = (k // ff - ff // 2, k % ff - ff // 2)."""
    torch.manual_seed(seed)
    taps = torch.randint(0, ff**2, (heads,))
    return [(int(t // ff - ff // 2), int(t % ff - ff // 2)) for t in taps]


def test_every_column_is_renormalised_to_the_initial_mean_column_norm_of_q():
    from convinit.init.paper_optimizer import optimize_factors
    from convinit.init.targets import Targets

    targets = Targets.build([(0, 1), (1, 0)], (4, 4))
    x = torch.randn(16, 12)
    torch.manual_seed(0)
    bound = math.sqrt(1 / 4 / 2)
    nq = (bound * (2 * torch.rand(2, 12, 4) - 1)).norm(dim=1).mean()  # the same first draw
    torch.manual_seed(0)
    wq, wk, _ = optimize_factors(x, targets, 4, 0.1, steps=1, lr=1e-4, renorm_every=100, generator=None)
    # one Adam step after the renormalisation at step 0 moves each column by at most ~lr * sqrt(rows)
    assert torch.allclose(wq.norm(dim=1), torch.full((2, 4), float(nq)), atol=1e-3)
    assert torch.allclose(wk.transpose(1, 2).norm(dim=1), torch.full((2, 12), float(nq)), atol=1e-3)


def test_a_model_at_paper_1s_attention_scale_takes_the_official_weights_unscaled_and_others_are_warned():
    def model(scale):
        sizes = dict(img_size=6, in_chans=1, patch_size=1, dim=32, depth=1, heads=2, dim_head=8, mlp_dim=16)
        return create_model("simplevit", **sizes, qk_input="blend", alpha=0.0, attn_scale=scale)

    paper = model(0.1)
    torch.manual_seed(42)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no rescaling warning at scale 0.1
        initialize(paper, "impulse", solver="optimize", steps=50, renorm_every=100, kernel_size=5)
    torch.manual_seed(42)
    wq, _ = official_impulse_init(2, 6, 8, 5, 0.1, paper.pos_embedding, norm=100, num_epoch=50)
    qk = paper.blocks[0].attn.to_qk.weight.detach()
    assert torch.allclose(qk[:16], wq.permute(0, 2, 1).reshape(16, 32), atol=1e-6)
    with pytest.warns(UserWarning, match="model_args.attn_scale=0.1"):
        initialize(model(None), "impulse", solver="optimize", steps=5, kernel_size=5)
