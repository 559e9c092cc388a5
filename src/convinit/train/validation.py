"""The config's checks, run before any data is read or any step taken, and the plan they resolve.

`validate(cfg)` refuses a config that cannot train with one line (a device that is not there, an
unknown init scheme or option, a missing dataset, unknown or impossible model arguments, a model too
large for the machine, an unknown logger or tracker) and returns the `RunPlan` it resolved on the way
(`convinit.train.plan`), which `build_run` follows without resolving any of it again.
"""

from __future__ import annotations

from pathlib import Path

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
from convinit.models.hf_layout import hf_grid, hf_vit_backbone
from convinit.system.torchvision_pair import check_pair
from convinit.train.loggers import check_loggers
from convinit.train.memory_guard import check_data_fits, check_fits_in_memory, check_model_args_bounded
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
        if not ((path / "config.yaml").is_file() or (path / "config.json").is_file()):
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
    size = plan.init.options.get("kernel_size")
    embed = getattr(meta_model, "patch_embed", None)
    grid = getattr(meta_model, "grid", None) or getattr(embed, "grid_size", None)
    if grid is None and (backbone := hf_vit_backbone(meta_model)) is not None:
        grid = hf_grid(backbone)
    if size is not None and grid is not None and plan.init.accepts("kernel_size"):
        check_kernel_fits(size, (int(grid[0]), int(grid[1])), "init_args.kernel_size")


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
        return
    if plan.cfg.qk_pull:  # a model without Q/K weights to anchor is refused before any data is read
        pulled_parameters(meta_model)
    check_scheme_applies(meta_model, plan.init.scheme)  # e.g. impulse on a ViT that is GPSA in every block
    check_init_kernel(plan, meta_model)
    shape = plan.shape
    check_fits_in_memory(meta_model, plan.largest_batch, shape.in_chans, shape.img_size, plan.device)
