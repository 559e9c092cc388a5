"""The two costs the papers' code is known for: impulse initialisation, and GPSA's positional attention.

Impulse init (docs/method.md §3): the closed-form solver on all of `vit_tiny_patch2_32` (without images,
and fitted on 64 real images with its real-pass report), and paper 1's
optimiser recipe per step on one layer (its 10,000 steps are projected from the per-step time).
GPSA (docs/method.md §5): one GPSA layer's forward + backward beside an MHSA layer of the same shape, and
the positional map alone (computed once per forward, shared by the batch).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from convinit.init import initialize
from convinit.init.paper_optimizer import optimize_factors
from convinit.init.targets import Targets, layer_offsets, map_quality
from convinit.models import create_model
from convinit.models.gpsa import GPSA
from convinit.models.layers import MHSA
from convinit.speed.timing import interleaved_medians

PAPER_STEPS = 10_000


def closed_form_impulse(model_name: str = "vit_tiny_patch2_32", images: int = 0) -> dict[str, Any]:
    """Wall time and fit of the closed-form impulse init of a whole model, without images (fitted on
    the pseudo-input) or fitted on `images` real images (`real_images`), the real-pass report included."""
    torch.manual_seed(0)
    model = create_model(model_name)
    batch, dataset = real_images(images, model.in_chans, model.img_size)
    start = time.perf_counter()
    report = initialize(model, "impulse", images=batch, solver="closed_form", seed=0)
    result = {
        "model": model_name,
        "images": images,
        "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - start,
        "kernel_size": report["kernel_size"],
        "mean_mass": report["mean_mass"],
        "argmax_agreement": report["mean_argmax_agreement"],
    }
    if batch is not None:
        result["dataset"] = dataset
        result["real_pass_mass"] = report["real_pass"]["mean_mass"]
        result["held_out_mass"] = report["real_pass_held_out"]["mean_mass"]
    return result


def real_images(count: int, channels: int, size: tuple[int, int]) -> tuple[torch.Tensor | None, str]:
    """`count` Fashion-MNIST training images (the digits if it is not installed), normalised, resized
    to `size` and repeated to `channels`, and the dataset's name; (None, "") for count 0."""
    if not count:
        return None, ""
    from convinit.data import load_dataset
    from convinit.errors import ConvinitError

    try:
        name, data = "fashion-mnist", load_dataset("fashion-mnist")
    except ConvinitError:
        name, data = "digits", load_dataset("digits")
    mean, std = torch.tensor(data.mean).view(1, -1, 1, 1), torch.tensor(data.std).view(1, -1, 1, 1)
    picks = torch.linspace(0, len(data.train_images) - 1, count).long()
    x = (data.train_images[picks].float() / 255 - mean) / std
    x = torch.nn.functional.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)
    return x.repeat(1, channels // x.shape[1], 1, 1), name


def optimizer_impulse(
    steps: int = 50,
    lr: float = 1e-4,
    scale: float = 0.1,
    kernel_size: int = 5,
    offsets: str = "random",
    model_name: str = "vit_tiny_patch2_32",
) -> dict[str, Any]:
    """Paper 1's recipe (Adam, renormalise every 100 steps; defaults lr 1e-4, scale 0.1) on layer 0 of
    a blend-alpha-0 ViT (X = P) for `steps` steps, after a 5-step untimed warm-up; time and fit."""
    model = create_model(model_name, qk_input="blend", alpha=0.0)
    attn = model.blocks[0].attn
    generator = torch.Generator().manual_seed(0)
    targets = Targets.build(layer_offsets(offsets, kernel_size, 0, attn.heads, generator), model.grid)
    optimize_factors(model.pos_embedding, targets, attn.dim_head, scale, 5, lr, 100, generator)  # warm-up
    start = time.perf_counter()
    wq, wk, _ = optimize_factors(
        model.pos_embedding, targets, attn.dim_head, scale, steps, lr, 100, generator
    )
    seconds = time.perf_counter() - start
    x = model.pos_embedding.double()
    maps = torch.softmax((x @ wq.double()) @ (x @ wk.double()).transpose(1, 2) * scale, dim=-1)  # (H, N, N)
    quality = map_quality(maps, targets)
    return {
        "steps": steps,
        "seconds": seconds,
        "seconds_per_step": seconds / steps,
        "projected_paper_seconds_per_layer": seconds / steps * PAPER_STEPS,
        "mean_mass": sum(quality["mass"]) / attn.heads,
        "argmax_agreement": sum(quality["argmax_agreement"]) / attn.heads,
        "mse": sum(quality["mse"]) / attn.heads,
    }


def gpsa_cost(
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype | None,
    dim: int = 192,
    heads: int = 4,
    grid: tuple[int, int] = (16, 16),
    repeats: int = 5,
) -> dict[str, Any]:
    """Forward + backward seconds of a GPSA layer, an MHSA layer and GPSA's positional map alone."""
    torch.manual_seed(0)
    gpsa = GPSA(dim, heads, grid).to(device)
    mhsa = MHSA(dim, heads).to(device)
    x = torch.randn(batch_size, grid[0] * grid[1], dim, device=device, requires_grad=True)

    def layer_step(layer: torch.nn.Module) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = layer(x)
        out.float().sum().backward()

    def positional_map() -> None:
        gpsa.positional_attention().sum().backward()

    cases = {
        "gpsa": lambda: layer_step(gpsa),
        "mhsa": lambda: layer_step(mhsa),
        "positional_map": positional_map,
    }
    timing = interleaved_medians(cases, device, warmup=2, repeats=repeats)
    seconds = {name: t["median"] for name, t in timing.items()}
    return {
        "shape": {"batch": batch_size, "tokens": grid[0] * grid[1], "dim": dim, "heads": heads},
        "gpsa_ms": 1e3 * seconds["gpsa"],
        "mhsa_ms": 1e3 * seconds["mhsa"],
        "gpsa_over_mhsa": seconds["gpsa"] / seconds["mhsa"],
        "positional_map_ms": 1e3 * seconds["positional_map"],
    }
