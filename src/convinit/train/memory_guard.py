"""A stated limit on model size, checked before anything is allocated.

A model too large for the machine used to be OOM-killed by the kernel with no message (dim=10000000)
or to hang while its modules were built (depth=100000000). Before training, `check_model_args_bounded`
refuses any integer model argument over `MAX_MODEL_ARG`, and `check_fits_in_memory` builds the model on
the meta device (shapes only, no memory), estimates what training needs (weights, gradients and two
optimiser moments per parameter, plus the activations of the largest batch the training set can form,
from a forward pass on the meta device) and refuses it when that exceeds the memory the training device
has in all: a verdict about the model, not about what other processes hold at that moment. Buffers
(a position table sized by the image) count once; activations that cannot be estimated are a refusal.
`check_data_fits` does the same for a fixed-format dataset's decoded images, before any is read.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from convinit.data.datasets import dataset_info
from convinit.errors import ConfigError

MAX_MODEL_ARG = 65536  # no integer model argument (dim, depth, heads, ...) may exceed this
COPIES_PER_PARAMETER = 4  # weights, gradients, Adam's two moments (EMA adds one more)
GIB = 1 << 30


def check_model_args_bounded(model_args: dict[str, Any]) -> None:
    """ConfigError for an integer model argument beyond `MAX_MODEL_ARG`, before any module is built."""
    for key, value in model_args.items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_MODEL_ARG:
            raise ConfigError(
                f"model_args.{key}={value} is over the limit of {MAX_MODEL_ARG} for an integer model "
                "argument; use a realistic size"
            )


def total_memory(device: torch.device) -> int | None:
    """Bytes `device` has in all (CUDA: the card's memory; CPU: MemTotal), None if unknown.

    The total, not what is free now: the verdict "this can never train here" must not depend on what
    other processes happen to hold at that moment (they come and go; the kernel and the driver page).
    """
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def largest_batch(
    batch_size: int, dataset: str, num_classes: int, per_class: int | None, train_fraction: float | None
) -> int:
    """The largest batch a run can form: `batch_size`, or fewer when the training set (after `per_class`
    or `train_fraction`) holds fewer images (no batch can hold more: drop_last keeps batches full-sized
    only while the set has that many); sets whose size is known only once read keep `batch_size`."""
    known = dataset_info(dataset).shape
    if known is None:
        return batch_size
    images = known.train_images
    if per_class is not None:
        images = min(images, per_class * num_classes)
    elif train_fraction is not None:
        images = min(images, math.ceil(train_fraction * images) + num_classes)  # at least one per class
    return min(batch_size, images)


def activation_bytes(model: nn.Module, batch_shape: tuple[int, ...]) -> int:
    """Sum of every leaf module's output size for one forward pass of a batch of `batch_shape` on the
    meta device: about what autograd keeps for the backward pass. ConfigError when that pass fails
    (an op without a meta kernel, or sizes whose storage overflows, as img_size=100000 does): the
    activations are then unknown, and an unknown size is never taken for zero."""
    total = 0

    def count(module: nn.Module, inputs: Any, output: Any) -> None:
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel() * 4  # float32

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    try:
        with torch.no_grad():
            model(torch.empty(batch_shape, device="meta"))
    except Exception as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise ConfigError(
            "the memory this model needs to train cannot be estimated: its forward pass on a batch of "
            f"{'x'.join(map(str, batch_shape))} fails on the meta device, which holds shapes only "
            f"({detail}); make the model or img_size smaller"
        ) from exc
    finally:
        for handle in handles:
            handle.remove()
    return total


def check_fits_in_memory(
    meta_model: nn.Module,
    batch_size: int,
    in_chans: int,
    img_size: int | tuple[int, int],
    device: torch.device,
) -> None:
    """ConfigError when training `meta_model` (built on the meta device) needs more than `device` has."""
    total = total_memory(device)
    if total is None:
        return
    parameters = sum(p.numel() for p in meta_model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in meta_model.buffers())  # e.g. a position table
    state = parameters * 4 * COPIES_PER_PARAMETER + buffers
    if state > total:  # no forward pass needed to know
        activations = 0
    else:
        size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        activations = activation_bytes(meta_model, (batch_size, in_chans, *size))
    if state + activations > total:
        need, state_gib, act_gib = (state + activations) / GIB, (state - buffers) / GIB, activations / GIB
        held = f"; {buffers / GIB:.1f} GiB of buffers" if buffers >= GIB // 10 else ""
        raise ConfigError(
            f"this model needs about {need:.1f} GiB to train ({parameters:,} parameters: {state_gib:.1f} GiB "
            f"of weights, gradients and optimiser state{held}; {act_gib:.1f} GiB of activations at "
            f"batch_size {batch_size}) but {device.type} has {total / GIB:.1f} GiB of memory in all; make "
            "the model smaller or lower batch_size"
        )


def check_data_fits(dataset: str, data_mode: str, device: torch.device) -> None:
    """ConfigError when a fixed-format dataset's decoded training images exceed the memory that must hold
    them whole: the device's with `data_mode=device`, the host's otherwise (its reader decodes the whole
    set; only a folder streams from disk). Sets whose size is known only once read are sized by
    `data/source.py` after decoding, before anything goes to the device."""
    known = dataset_info(dataset).shape
    if known is None:
        return
    needed = known.train_images * known.in_chans * known.side**2
    where = device if data_mode == "device" else torch.device("cpu")
    total = total_memory(where)
    if total is not None and needed > total:
        remedy = "use data_mode=auto or stream" if data_mode == "device" else "use a machine with more memory"
        raise ConfigError(
            f"{dataset}'s {known.train_images:,} training images need {needed / GIB:.1f} GiB decoded but "
            f"{where.type} has {total / GIB:.1f} GiB of memory in all; {remedy}"
        )
