"""Why the convolutional bias of an impulse-initialised blend ViT fades or collapses in training
(docs/method.md §7).

For each run directory given (blend SimpleViT runs trained with `track=[init_quality]`), per layer,
at step 0 and after the last epoch: target mass, best-offset mass and row entropy (the run's own
tracker figures, metrics.jsonl), the Q/K weight rms over that of the model's default init, and where
the attention logits come from on 64 test images: the Q/K input alpha*LN(x) + (1-alpha)*P splits into
content c and position p, the logits (c+p)Wq Wk^T(c+p)^T * scale into a position-only term p..p and
the rest (c..c + c..p + p..c); the table gives the std of each over logits, and the target mass of
softmax(position-only logits). The step-0 model is rebuilt exactly as the trainer built it (same seed,
same init on the same images; its tracker figures are checked against the run's). Means over the runs.

    python benchmarks/bias_diagnostics.py runs/paper1/fashion/alpha0.5/impulse/seed*
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import torch

from convinit.analysis.init_quality import init_quality, report_offsets
from convinit.init.attention_sites import attention_slots, rms
from convinit.init.measure import qk_inputs
from convinit.init.targets import Targets, target_mass
from convinit.runs.metrics import read_metrics
from convinit.train.opening import open_run
from convinit.train.run_builder import TRACK_BATCH

IMAGES = 64


def step0_and_final(run_dir: Path):
    """The run's model as the trainer initialised it, the same model after training, and its test images:
    the run reopened twice, as every tool reopens one (convinit.train.opening)."""
    start = open_run(run_dir, at="init")
    end = open_run(run_dir, data=False)
    end.model.init_report = start.init_report
    start.model.init_report = start.init_report
    images = start.data.test_batch(TRACK_BATCH, torch.device("cpu"))[:IMAGES]
    return start.cfg, start.model, end.model, images


def qk_logits(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, scale: float) -> torch.Tensor:
    """(x Wq_h)(x Wk_h)^T * scale for x (B, N, D) and per-head weights (H, d, D): (B, H, N, N)."""
    q = torch.einsum("bnD,heD->bhne", x, wq)
    k = torch.einsum("bnD,heD->bhne", x, wk)
    return q @ k.transpose(-2, -1) * scale


@torch.no_grad()
def logit_sources(model, images: torch.Tensor, offsets) -> list[dict[str, float]]:
    """Per layer: std of the position-only logits and of the content terms; mass of position-only maps."""
    slots = attention_slots(model, "measure")
    position = model.logit_position_embedding().double() * (1 - model.alpha)  # (N, D)
    out = []
    for slot, u in zip(slots, qk_inputs(model, slots, images), strict=True):
        heads, d = slot.heads, slot.dim_head
        wq = slot.q_weight.double().reshape(heads, d, -1)  # (H, d, D)
        wk = slot.k_weight.double().reshape(heads, d, -1)

        u = u.double()
        p = position.expand_as(u)
        full, pp = qk_logits(u, wq, wk, slot.scale), qk_logits(p, wq, wk, slot.scale)
        maps = torch.softmax(pp[:1], dim=-1)[0]  # (H, N, N), the same for every image
        mass = target_mass(maps, Targets.build(list(offsets[slot.layer]), slot.grid)).mean()
        default = slot.default_rms
        weight = (rms(slot.q_weight) + rms(slot.k_weight)) / 2 / default
        out.append(
            {"position logits std": float(pp.std()), "content logits std": float((full - pp).std()),
             "position-only mass": float(mass), "Q/K rms / default": weight,
             "LN gain rms": rms(model.blocks[slot.layer].norm.weight)}
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    table: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    for run_dir in args.runs:
        cfg, start, end, images = step0_and_final(run_dir)
        offsets = report_offsets(start.init_report)
        rows = read_metrics(run_dir / "metrics.jsonl")
        rebuilt = init_quality(start, images, offsets)["init_quality/target_mass"]
        logged = rows[0].get("init_quality/target_mass")
        if logged is not None and abs(rebuilt - logged) > 1e-4:
            raise SystemExit(
                f"{run_dir}: the rebuilt step-0 model gives mass {rebuilt:.4f}, the run {logged:.4f}"
            )
        for when, model, row in (("step 0", start, rows[0]), ("end", end, rows[-1])):
            for layer, figures in enumerate(logit_sources(model, images, offsets)):
                for key in ("target_mass", "best_offset_mass", "entropy"):
                    table[(layer, when, key.replace("_", " "))].append(row[f"init_quality/L{layer}/{key}"])
                for key, value in figures.items():
                    table[(layer, when, key)].append(value)
        print(f"{run_dir}: alpha {cfg.model_args.get('alpha')}, final test acc {rows[-1]['test_acc']:.2f}")
    keys = list(dict.fromkeys(k for _, _, k in table))
    print("| layer | when | " + " | ".join(keys) + " |")
    print("| ---: | --- |" + " ---: |" * len(keys))
    for layer, when in dict.fromkeys((layer, when) for layer, when, _ in table):
        cells = [f"{statistics.fmean(table[(layer, when, k)]):.2f}" for k in keys]
        print(f"| {layer} | {when} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
