"""Optimiser and learning-rate schedule presets.

Weight decay skips 1-D parameters (biases, norms, gates), position embeddings and class tokens, as in
DeiT/timm. A model with its own training-time state (SimpleViT's content_warmup and content_projection,
docs/training.md) starts it when its optimiser is built (`start_model_schedule`). The schedule is torch's
own: LinearLR warm-up, then CosineAnnealingLR down to `min_lr`, chained with SequentialLR and stepped
once per optimisation step.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, LRScheduler, SequentialLR

from convinit.config import TrainConfig

NO_DECAY_NAMES = ("pos_embed", "pos_embedding", "cls_token", "dist_token")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or any(key in name for key in NO_DECAY_NAMES):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def effective_lr(cfg: TrainConfig) -> float:
    """`lr`, scaled by batch_size / lr_base_batch when the preset says so (DeiT: 5e-4 x batch/512)."""
    return cfg.lr * cfg.batch_size / cfg.lr_base_batch if cfg.lr_base_batch else cfg.lr


def fused_or_default(optimizer: type[torch.optim.Optimizer], params: list, **kwargs) -> torch.optim.Optimizer:
    """torch's fused kernel (one pass over each tensor) where the device supports it, else the default.

    Measured on 2 CPU cores, AdamW on ViT-Ti's 5.5M parameters: ~8x faster than the default
    per-parameter loop, enough to matter beside a ~1 s training step. Same update rule, float rounding aside.
    """
    try:
        return optimizer(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # a device or dtype without a fused kernel
        return optimizer(params, **kwargs)


def start_model_schedule(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """`model.start_training()`, where the model has one, and its per-step call after every optimiser
    step: state that moves with training (a ramp, a projector fixed after the init) lives in the model's
    buffers, so a checkpoint saves it and a resume, which loads the weights after this, restores it."""
    start = getattr(model, "start_training", None)
    step = start() if callable(start) else None
    if step is not None:
        optimizer.register_step_post_hook(lambda *_: step())


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    lr = effective_lr(cfg)
    if cfg.optimizer == "adam":  # paper 1: Adam, no weight decay unless asked
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = fused_or_default(torch.optim.Adam, params, lr=lr, weight_decay=cfg.weight_decay)
    elif cfg.optimizer == "adamw":
        optimizer = fused_or_default(torch.optim.AdamW, parameter_groups(model, cfg.weight_decay), lr=lr)
    else:
        groups = parameter_groups(model, cfg.weight_decay)
        optimizer = fused_or_default(torch.optim.SGD, groups, lr=lr, momentum=cfg.momentum, nesterov=True)
    start_model_schedule(model, optimizer)
    return optimizer


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int) -> LRScheduler:
    total = cfg.epochs * steps_per_epoch
    warmup = min(int(round(cfg.warmup_epochs * steps_per_epoch)), total - 1)
    if cfg.schedule == "constant":
        main: LRScheduler = ConstantLR(optimizer, factor=1.0, total_iters=0)
    else:
        main = CosineAnnealingLR(optimizer, T_max=max(total - warmup, 1), eta_min=cfg.min_lr)
    if warmup <= 0:
        return main
    ramp = LinearLR(optimizer, start_factor=1.0 / warmup, end_factor=1.0, total_iters=max(warmup - 1, 1))
    return SequentialLR(optimizer, [ramp, main], milestones=[warmup])
