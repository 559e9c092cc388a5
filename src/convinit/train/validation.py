"""The config's checks, run before any data is read or any step taken, and the plan they resolve.

`validate(cfg)` refuses a config that cannot train with one line (a device that is not there, an
unknown init scheme or option, a missing dataset, unknown or impossible model arguments, a model too
large for the machine, an unknown logger or tracker) and returns the `RunPlan` it resolved on the way
(`convinit.train.plan`), which `build_run` follows without resolving any of it again.

The memory guard: a stated limit on model size, checked before anything is allocated.

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

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from convinit.config import TrainConfig, say_notes, say_once, unsay
from convinit.config.recommendation import applied_note
from convinit.data import check_available, dataset_info
from convinit.errors import ConfigError
from convinit.init import check_scheme_applies
from convinit.init.registry import init_spec
from convinit.models.arguments import check_model_arguments
from convinit.models.external import is_external
from convinit.models.filters import check_kernel_fits
from convinit.models.small_heads import SMALL_HEAD_DIM, build_failure, kernel_layers
from convinit.models.token_grid import token_grid
from convinit.runs.run_dir import CONFIG_FILE
from convinit.system.torchvision_pair import check_pair
from convinit.train.loggers import check_loggers
from convinit.train.opening import open_data, source_shape
from convinit.train.optim import pulled_parameters
from convinit.train.plan import RunPlan, recipe_note, resolve_plan


def validate(cfg: TrainConfig) -> RunPlan:
    """Every check that can run before any data is read or any step taken (one-line errors); returns the
    plan the run is built from."""
    plan = resolve_plan(cfg)  # first: a device that is not there is the first thing to say
    if cfg.recommended == "applied" and unsay(applied_note(cfg.model)):  # a fresh run resolved the recipe
        if plan.shape is not None:  # else the builder says it, once the data's shape tells
            say_once(recipe_note(plan))
    check_pair(torchvision_use(cfg))  # a torchvision built for another torch, named with its fix
    init_spec(plan.init.scheme, plan.init.options)  # an unknown scheme or option, before any folder exists
    if cfg.teacher is not None:
        path = Path(cfg.teacher)
        if not ((path / CONFIG_FILE).is_file() or (path / "config.json").is_file()):
            raise ConfigError(
                f"teacher {path} is neither a run directory nor a saved model (convinit export)"
            )
    if cfg.data_dir is not None and not dataset_info(cfg.dataset).needs_dir:
        raise ConfigError(
            f"dataset {cfg.dataset} is embedded and reads no data_dir ({cfg.data_dir}): drop data_dir=, or "
            "name the reader of your files (dataset=folder for one subfolder of images per class)"
        )
    check_available(cfg.dataset, cfg.data_dir, cfg.download, **plan.data.options)
    if cfg.hflip and dataset_info(cfg.dataset).mirror_keeps_class is False:
        say_once(mirror_note(cfg.dataset))
    check_model_args_bounded(cfg.model_args)
    check_model_arguments(cfg.model, cfg.model_args)
    check_data_fits(cfg.dataset, cfg.data_mode, plan.device)
    if plan.model is not None:
        check_model(plan)
    check_loggers(cfg.logger)
    if cfg.track:
        from convinit.analysis import get_tracker

        for name in cfg.track:
            get_tracker(name)
    say_notes()  # the adapted defaults' notes, now that nothing refused the config
    return plan


def decided_config(cfg: TrainConfig) -> TrainConfig:
    """The config a new run of `cfg` trains and saves as `config.yaml`, decided without writing anything
    (`convinit train --dry-run`): validated, and planned on the data's own shape where the dataset's is
    known only once read (a folder, a Hub set), which can revert the recommended recipe (said in one line)."""
    plan = validate(cfg)
    if plan.shape is not None:
        return plan.cfg
    planned = plan.on_data(source_shape(open_data(plan)))
    if cfg.recommended == "applied":
        say_once(recipe_note(planned))
        say_notes()
    return planned.cfg


def mirror_note(dataset: str) -> str:
    """hflip on a data set whose class a mirror can change: trained as asked, said in one line."""
    return (
        f"hflip=true mirrors {dataset}'s images, and a mirror can change their class (a mirrored 2, 3 or 7 "
        "is no digit): crop_padding alone respects such data; hflip=false turns the flips off"
    )


def torchvision_use(cfg: TrainConfig) -> str | None:
    """What in `cfg` imports torchvision (None: nothing does): only those runs need a working one."""
    uses = {
        "mixup and cutmix": cfg.mixup > 0 or cfg.cutmix > 0,
        f"model {cfg.model}": is_external(cfg.model),
        "randaugment_policy=torchvision": cfg.randaugment_n > 0 and cfg.randaugment_policy == "torchvision",
        "repeated_aug (timm's sampler)": cfg.repeated_aug > 1,
        "data_mode=stream (timm's transforms)": cfg.data_mode == "stream",
        "download=true": cfg.download,
    }
    return next((what for what, used in uses.items() if used), None)


def check_init_kernel(plan: RunPlan, meta_model: nn.Module) -> None:
    """An init's kernel_size against the model's patch grid, before the run folder exists (the scheme
    checks it again on the built model, before listing a single offset)."""
    size, grid = plan.init.options.get("kernel_size"), token_grid(meta_model)
    if size is not None and grid is not None and plan.init.accepts("kernel_size"):
        check_kernel_fits(size, grid, "init_args.kernel_size")


def check_attention_kernel(plan: RunPlan, model: nn.Module) -> None:
    """`attention_kernel=small_heads` is refused in one line where it would do nothing (another device, a
    lower precision, no layer of `model`, the plan's model as built on the meta device, that it runs) or
    cannot be built, before the run folder is touched."""
    cfg = plan.cfg
    if cfg.attention_kernel != "small_heads":
        return
    fix = "use attention_kernel=sdpa"
    if plan.device.type != "cpu" or plan.dtype is not None:
        where = f"precision={cfg.precision}" if plan.device.type == "cpu" else f"device {plan.device.type}"
        raise ConfigError(
            f"attention_kernel=small_heads is a float32 CPU kernel; this run has {where}; {fix}"
        )
    if not kernel_layers(model):
        raise ConfigError(
            f"attention_kernel=small_heads runs no layer of {cfg.model}: it runs convinit's attention "
            f"layers (a converted ViT's too, convert=blend) with heads of dim {SMALL_HEAD_DIM} or less and "
            f"no attention dropout; {fix}, or more, smaller heads"
        )
    failure = build_failure()
    if failure is not None:
        raise ConfigError(f"attention_kernel=small_heads cannot be used here: {failure}; {fix}")


def check_model(plan: RunPlan) -> None:
    """The plan's model constructed on the meta device: its arguments checked and its size weighed
    against the training device's memory without allocating a weight or drawing a random number (the
    run's own model is built later, once, by `build_run`; see `convinit.train.plan`)."""
    try:
        with torch.device("meta"):
            meta_model = plan.model.construct()
    except ConfigError:
        raise
    except Exception as exc:
        if not plan.model.needs_real_values(exc):  # the arguments: refused without building a real model
            raise plan.model.refusal(exc) from exc
        model = plan.model.build()  # a constructor that reads values (no meta build): checked on the CPU
        if plan.cfg.qk_pull:
            pulled_parameters(model)
        check_scheme_applies(model, plan.init.scheme)
        check_attention_kernel(plan, model)
        return
    if plan.cfg.qk_pull:  # a model without Q/K weights to anchor is refused before any data is read
        pulled_parameters(meta_model)
    check_scheme_applies(meta_model, plan.init.scheme)  # e.g. impulse on a ViT that is GPSA in every block
    check_init_kernel(plan, meta_model)
    check_attention_kernel(plan, meta_model)
    shape = plan.shape
    check_fits_in_memory(meta_model, plan.largest_batch, shape.in_chans, shape.img_size, plan.device)


# --- the memory guard: a stated limit on model size, checked before anything is allocated ---


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
