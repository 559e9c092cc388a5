"""Paper 1's optimiser recipe for impulse Q/K, exactly as the official `impulse_init` runs it
(docs/method.md §3).

Wq (H, D, r) and Wk (H, r, D) start U(+-sqrt(1/(r H))); Adam (lr 1e-4) for 10,000 steps on
MSE(softmax(X Wq Wk X^T * scale), T) with scale 0.1. At step 0 and every `renorm_every` (100) steps,
before the step, every column of Wq (its norm over D, per head and rank index) and every column of Wk
(its norm over r, per head and D index) is rescaled to nq, the mean column norm of the initial Wq:
both to Q's norm ("weight normalisation": without it the weights grow without bound). The random
draws (Wq, then Wk) and the order of the operations follow the official function, so that the same
seed gives the same weights (tests/init/test_paper_optimizer.py checks it against a transcription).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from convinit.init.targets import Targets


def optimize_factors(
    x: torch.Tensor,
    targets: Targets,
    dim_head: int,
    scale: float,
    steps: int,
    lr: float,
    renorm_every: int,
    generator,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Fit Wq, Wk to the targets on input x (N, D); returns them as (H, D, r) each and the final MSE.

    With X = I (Model III) Wq, Wk are the factors themselves. renorm_every 0 never renormalises.
    """
    heads, dim = len(targets.offsets), x.shape[1]
    bound = math.sqrt(1.0 / dim_head / heads)
    wq = torch.nn.Parameter(bound * (2 * torch.rand(heads, dim, dim_head, generator=generator) - 1))
    wk = torch.nn.Parameter(bound * (2 * torch.rand(heads, dim_head, dim, generator=generator) - 1))
    nq = wq.detach().norm(dim=1).mean()
    x, target = x.float(), targets.maps.float()
    optimizer = torch.optim.Adam([wq, wk], lr=lr)
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        if renorm_every and step % renorm_every == 0:
            with torch.no_grad():  # every column to Q's initial mean column norm
                wq.div_(wq.detach().norm(dim=1, keepdim=True) / nq)  # norms over D
                wk.div_(wk.detach().norm(dim=1, keepdim=True) / nq)  # norms over r
        optimizer.zero_grad()
        outputs = torch.softmax((x @ wq @ wk @ x.T) * scale, -1)  # (H, N, N)
        loss = F.mse_loss(outputs, target)
        loss.backward()
        optimizer.step()
    return wq.detach(), wk.detach().transpose(1, 2), float(loss.detach())
