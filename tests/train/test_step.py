"""The training step keeps its bookkeeping on the device and skips a non-finite step without a read."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from convinit import create_model
from convinit.data import BatchAugment, MixupCutmix
from convinit.train.step_parts import DeviceEMA, StepParts, StepTotals
from convinit.train.trainer import train_step

# device-to-host reads: what `.item()`, `bool(tensor)`, `torch.equal` and friends dispatch to
HOST_READS = {"_local_scalar_dense", "is_nonzero", "equal", "item"}


class CountHostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in HOST_READS:
            self.reads.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class PoisonableLoss(nn.CrossEntropyLoss):
    """Cross-entropy that returns NaN while `poisoned`: a diverged step whose weights are still finite."""

    poisoned = False

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = super().forward(logits, targets)
        return loss * float("nan") if self.poisoned else loss


def parts(ema: bool = True, mixup: float = 0.0) -> StepParts:
    torch.manual_seed(0)
    shape = dict(num_classes=4, img_size=8, in_chans=1, patch_size=2, dim=16, depth=1, heads=2)
    model = create_model("simplevit", **shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    augment = BatchAugment(
        (0.5,), (0.25,), train=True, crop_padding=1, hflip=True, randaugment_n=2, random_erasing=0.25
    )
    return StepParts(
        net=model,
        model=model,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.ConstantLR(optimizer, 1.0, 0),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        criterion=PoisonableLoss(label_smoothing=0.1),
        mix=MixupCutmix(4, mixup_alpha=mixup),
        augment=augment,
        teacher=None,
        ema=DeviceEMA(model, 0.9) if ema else None,
        layout=torch.contiguous_format,
        dtype=None,
        distill_weight=0.5,
        clip_grad=1.0,
        check_loss=True,
    )


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (8, 1, 8, 8), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, 4, (8,), generator=generator)


def test_steps_read_nothing_back_from_the_device_until_the_totals_are_read():
    """Augmentation, forward, backward, clipping, the fused update, the schedule and the EMA: no read.
    (Mixup is left out: torchvision samples its lambda on the host, a CPU value and not a device read,
    which this CPU-only count could not tell apart.)"""
    step_parts, totals = parts(), StepTotals(torch.device("cpu"))
    train_step(step_parts, totals, *batch(), 0)  # first step: lazy state (optimizer moments) is built
    with CountHostReads() as counter:
        for index in range(1, 6):
            train_step(step_parts, totals, *batch(index), index)
    assert counter.reads == []
    with CountHostReads() as counter:
        values = totals.read()
    assert len(counter.reads) <= 1 and values["seen"] == 48


def test_a_non_finite_step_leaves_weights_moments_and_ema_untouched_and_is_counted():
    step_parts, totals = parts(), StepTotals(torch.device("cpu"))
    for index in range(2):
        train_step(step_parts, totals, *batch(index), index)
    weights = copy.deepcopy(step_parts.model.state_dict())
    moments = copy.deepcopy(step_parts.optimizer.state_dict()["state"])
    ema = copy.deepcopy(step_parts.ema.module.state_dict())
    step_parts.criterion.poisoned = True
    train_step(step_parts, totals, *batch(2), 7)
    assert all(torch.equal(v, weights[k]) for k, v in step_parts.model.state_dict().items())
    for index, state in step_parts.optimizer.state_dict()["state"].items():
        assert all(torch.equal(value, moments[index][key]) for key, value in state.items())
    assert all(torch.equal(v, ema[k]) for k, v in step_parts.ema.module.state_dict().items())
    values = totals.read()
    assert (values["skipped"], values["first_bad"], values["seen"]) == (1, 7, 16)
    step_parts.criterion.poisoned = False
    train_step(step_parts, totals, *batch(3), 8)
    assert not all(torch.equal(v, weights[k]) for k, v in step_parts.model.state_dict().items())


def test_device_ema_follows_torchs_ema_rule():
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    ours = DeviceEMA(model, 0.9)
    theirs = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
    for _ in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model(torch.randn(4, 3))  # moves BatchNorm's running statistics and counter
        ours.update_parameters(model)
        theirs.update_parameters(model)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def lerp_per_tensor(ema: DeviceEMA, model: nn.Module, updated: torch.Tensor) -> None:
    """The update as it was: one `lerp_` per tensor with weight 1 (first), 0 (skipped) or 1 - decay."""
    first = (ema.n_averaged == 0).float()
    weight = (first + (1 - first) * (1 - ema.decay)) * updated.float()
    for a, b in zip(ema.module.parameters(), model.parameters(), strict=True):
        a.detach().lerp_(b.detach(), weight)
    ema.n_averaged += 1


def test_the_fused_ema_update_equals_a_lerp_per_tensor_bit_for_bit_first_skipped_and_normal_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3))
    ours, reference = DeviceEMA(model, 0.99), DeviceEMA(model, 0.99)
    for updated in (True, True, False, True, True):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        flag = torch.tensor(updated)
        ours.update_parameters(model, flag)
        lerp_per_tensor(reference, model, flag)
        for a, b in zip(ours.module.parameters(), reference.module.parameters(), strict=True):
            assert torch.equal(a, b)
    assert torch.equal(ours.n_averaged, reference.n_averaged)


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_the_ema_update_launches_as_many_ops_for_40_tensors_as_for_4():
    """Each `_foreach_*` op is one fused launch (per chunk of tensors) on a GPU: the count must not grow
    with the model's tensors, as a `_foreach_lerp_` with a list of 0-dim weights did (one per tensor)."""
    counts = []
    for layers in (2, 20):
        model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)])
        ema = DeviceEMA(model, 0.99)
        ema.update_parameters(model)
        with CountOps() as counter:
            ema.update_parameters(model, torch.tensor(True))
        counts.append(counter.count)
    assert counts[0] == counts[1] <= 20, counts


def test_totals_sum_what_each_step_saw():
    step_parts, totals = parts(ema=False), StepTotals(torch.device("cpu"))
    for index in range(3):
        train_step(step_parts, totals, *batch(index), index)
    values = totals.read()
    assert values["seen"] == 24 and 0 <= values["correct"] <= 24 and values["loss"] > 0
    totals.new_epoch()
    assert totals.read()["seen"] == 0 and totals.read()["skipped"] == 0


@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.SGD])
def test_the_fused_kernel_skips_where_found_inf_is_set(optimizer):
    layer = nn.Linear(3, 2)
    opt = optimizer(layer.parameters(), lr=0.1, fused=True)
    layer(torch.randn(2, 3)).sum().backward()
    before = [p.clone() for p in layer.parameters()]
    opt.grad_scale, opt.found_inf = None, torch.tensor(1.0)
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True))


def test_compile_mode_auto_is_cuda_graphs_without_autotuning_on_one_gpu_and_torchs_default_elsewhere():
    from convinit.config import resolve_config
    from convinit.train.step_parts import compile_mode

    auto = resolve_config(None, ["compile=true"])
    assert compile_mode(auto, torch.device("cuda")) == "reduce-overhead"
    assert compile_mode(auto, torch.device("cuda"), distributed=True) == "default"
    assert compile_mode(auto, torch.device("cpu")) == "default"
    chosen = resolve_config(None, ["compile=true", "compile_mode=max-autotune"])
    assert compile_mode(chosen, torch.device("cuda")) == "max-autotune"
