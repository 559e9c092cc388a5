"""A run's plan: every decision taken from its config before any work, made once, by `validate`.

`validate(cfg)` checks the config and returns a `RunPlan`; `train` hands that plan to `build_run`,
which reads these decisions and takes none of them again:

- the training device (`device=auto` looked up once; under torchrun, this rank's GPU);
- the number formats of the step, the evaluation and the forward check (autocast dtype, memory layout);
- the shape of the data (classes, channels, image size as the model sees it): known without reading
  for the built-in sets; a folder's or a Hub dataset's is known only once read, and the builder
  completes the plan from the data it reads (`RunPlan.model_for`);
- the model: its name and every constructor argument (`ModelSpec`);
- the data recipe (`DataRecipe`: which images, which subset, how served and augmented) and the init spec
  (`InitSpec`: the scheme and its options, checked against the scheme's signature by `validate`): the
  typed parts the data and init layers take, so that no layer below `train/` reads the configuration;
- the largest batch the training set can form (what the memory guard sizes activations by).

Why the model is constructed on the meta device in validation and for real in the builder, rather than
built once in validation and handed over: the memory guard must measure a model before it is allocated
(one too large for the machine is refused, not OOM-killed), and the real weights must be drawn after
the run is seeded and its data prepared, where they always were, so that a run and its resumption are
the same bit for bit. A meta construction allocates nothing and draws no random numbers, so it can come
first; the real model is built once, by the builder, from the `ModelSpec` validation measured. A model
that cannot be constructed on the meta device even with its default arguments (a registered model
whose constructor reads values with `.item()`) is checked by a CPU construction in validation whose
weights are thrown away; a model refused for its arguments is never built for real (`ModelSpec.refusal`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
import torch.nn as nn

from convinit.config import TrainConfig
from convinit.config.recommendation import applied_note, not_applied_note
from convinit.data.datasets import dataset_info
from convinit.data.recipe import AugmentRecipe, DataRecipe
from convinit.errors import ConfigError
from convinit.init.registry import InitSpec
from convinit.models.arguments import culprits, refusal
from convinit.models.convert import Conversion, conversion_of, convert
from convinit.models.external import build_model_by_name
from convinit.train.process import autocast_dtype, memory_format, resolve_device, under_torchrun
from convinit.train.recommendation import kernel_note, recipe_kernel, recipe_refusal


@dataclass(frozen=True)
class DataShape:
    """What the model is built for: classes, channels and image size, (H, W) as the data gives it or
    the config's `img_size`."""

    num_classes: int
    in_chans: int
    img_size: int | tuple[int, int]


def known_shape(cfg: TrainConfig) -> DataShape | None:
    """The configured dataset's shape without reading it, as its reader registered it; None if unknown."""
    known = dataset_info(cfg.dataset).shape
    if known is None:
        return None
    return DataShape(known.num_classes, known.in_chans, cfg.img_size or (known.side, known.side))


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


@dataclass(frozen=True)
class ModelSpec:
    """A model described, not built: its name, the config's `model_args` and the data shape it is for.

    `build` is the one place a training model is constructed, so validation's meta construction and the
    builder's real one take the same arguments in the same form.
    """

    name: str
    model_args: dict[str, Any] = field(hash=False)
    shape: DataShape
    conversion: Conversion | None = None  # `convert=`: the architecture put into a timm or transformers ViT

    def construct(self) -> nn.Module:
        """The constructor call itself (on the default device; errors as the model raises them).

        The data's shape and `model_args` are passed as separate keywords so that a `model_args` key
        that repeats one of them is an error, not a silent override."""
        shape = self.shape
        model = build_model_by_name(
            self.name,
            num_classes=shape.num_classes,
            img_size=shape.img_size,
            in_chans=shape.in_chans,
            **self.model_args,
        )
        if self.conversion is not None:
            convert(model, **self.conversion.to_dict())
        return model

    def build(self) -> nn.Module:
        """The model (a convinit preset, `timm:NAME` or `hf:vit`: `convinit.models.external`);
        ConfigError if its arguments are unknown or impossible for this data."""
        try:
            return self.construct()
        except ConfigError:
            raise
        except Exception as exc:  # whatever a constructor raises (KeyError, ImportError, 0 ** -0.5 ...)
            raise self.refusal(exc) from exc

    def refusal(self, exc: BaseException) -> ConfigError:
        """The one line that names the `model_args` keys a failed construction is due to (found by
        constructing on the meta device: never a real model on this path) and the constructor's reason."""
        keys = culprits(lambda args: replace(self, model_args=args).construct(), self.model_args)
        return refusal(self.name, self.model_args, keys, exc)

    def needs_real_values(self, exc: BaseException) -> bool:
        """Whether a construction on the meta device failed because of the meta device (a constructor
        that reads values, e.g. with `.item()`: it must be checked on the CPU) rather than because of the
        arguments (the same model builds there with its default arguments)."""
        if "meta" in str(exc).lower():
            return True
        try:
            with torch.device("meta"):
                replace(self, model_args={}).construct()
        except ConfigError:  # the defaults refused by value (a patch larger than the image): built there
            return False
        except Exception:
            return True
        return False


def data_recipe(cfg: TrainConfig) -> DataRecipe:
    """The data layer's part of `cfg`: the keys named as `DataRecipe`'s fields, and the reader's own
    options (the keys its `DatasetInfo.options` names, e.g. hf_name)."""
    augment = AugmentRecipe(**{f.name: getattr(cfg, f.name) for f in fields(AugmentRecipe)})
    taken = {f.name for f in fields(DataRecipe)} - {"options", "augment"}
    options = {key: getattr(cfg, key) for key in dataset_info(cfg.dataset).options}
    return DataRecipe(**{key: getattr(cfg, key) for key in taken}, options=options, augment=augment)


@dataclass(frozen=True)
class RunPlan:
    """Everything resolved from a run's config before any work (see the module docstring)."""

    cfg: TrainConfig
    device: torch.device
    dtype: torch.dtype | None  # autocast's, None for full precision
    layout: torch.memory_format  # of input batches and 4-D weights
    shape: DataShape | None  # None until the data is read (folders, Hub datasets)
    model: ModelSpec | None  # None while the shape is unknown
    largest_batch: int  # the largest batch the training set can form
    data: DataRecipe  # what the data layer takes
    init: InitSpec  # what the init takes
    # why the recommended recipe (`recommended: applied`) was left out: the model refused it on this data
    recipe_refused: str | None = None

    def on_data(self, shape: DataShape) -> RunPlan:
        """The plan for the data as read: this one when the shape was known beforehand (the data must
        agree with it), else the config planned on the shape the data has, the recommended recipe
        checked against it (`settled`)."""
        if self.model is not None:
            self.model_for(shape)
            return self
        cfg, refused = settled(self.cfg, shape)
        model = ModelSpec(cfg.model, cfg.model_args, shape, conversion_in(cfg))
        init = InitSpec(cfg.init, dict(cfg.init_args))
        return replace(self, cfg=cfg, shape=shape, model=model, init=init, recipe_refused=refused)

    def model_for(self, shape: DataShape) -> ModelSpec:
        """The model for the data as read: the plan's own when the shape was known beforehand (and the
        data must agree with it), else the configured model on the shape the data has."""
        if self.model is None:
            return ModelSpec(self.cfg.model, self.cfg.model_args, shape, conversion_in(self.cfg))
        if shape != self.shape:
            raise RuntimeError(
                f"dataset {self.cfg.dataset!r} was read as {shape} but planned as {self.shape}: "
                "the shape its reader registers (DatasetInfo.shape) is out of date"
            )
        return self.model


def training_device(name: str) -> torch.device:
    """The device `name` asks for; under torchrun a GPU run trains on this rank's own GPU (LOCAL_RANK,
    the index torchrun gives each process on a node)."""
    device = resolve_device(name)
    if device.type == "cuda" and under_torchrun():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def resolve_plan(cfg: TrainConfig, device: torch.device | None = None) -> RunPlan:
    """The plan of `cfg`, on `device` if given (tools that pick the device themselves), else on the one
    the config names. Resolves, checks nothing beyond the device name: `validate` does the checking."""
    device = training_device(cfg.device) if device is None else device
    shape = known_shape(cfg)
    refused = None
    if shape is not None:
        cfg, refused = settled(cfg, shape)
    formats = (autocast_dtype(cfg, device), memory_format(cfg))
    parts = dict(data=data_recipe(cfg), init=InitSpec(cfg.init, dict(cfg.init_args)))
    if shape is None:  # an unread set's size is unknown: the batch is as asked
        return RunPlan(cfg, device, *formats, None, None, cfg.batch_size, **parts)
    batch = largest_batch(cfg.batch_size, cfg.dataset, shape.num_classes, cfg.per_class, cfg.train_fraction)
    model = ModelSpec(cfg.model, cfg.model_args, shape, conversion_in(cfg))
    return RunPlan(cfg, device, *formats, shape, model, batch, **parts, recipe_refused=refused)


def settled(cfg: TrainConfig, shape: DataShape) -> tuple[TrainConfig, str | None]:
    """`cfg` as it trains on data of `shape`: a run that got the recommended recipe (`recommended:
    applied`, convinit.config.recommendation) whose model refuses it trains the model as it is, at random
    init (`recommended: none`), and the refusal says why; on a grid too small for impulse's 5x5 kernel but
    not for a 3x3 one the recipe trains with init_args.kernel_size=3 (`recipe_kernel`), saved with the run;
    any other run is `cfg` itself.

    Decided on the meta device, before any weight is drawn. A model whose own arguments fail is left to
    validation's check, which names them."""
    if cfg.recommended != "applied":
        return cfg, None
    try:
        with torch.device("meta"):
            plain = ModelSpec(cfg.model, cfg.model_args, shape).construct()
    except Exception:
        return cfg, None
    kernel = None if "kernel_size" in cfg.init_args else recipe_kernel(plain)  # read before converting
    reason = recipe_refusal(plain, conversion_in(cfg), cfg.init_args.get("kernel_size"))
    if reason is None:
        return (
            cfg if kernel is None else replace(cfg, init_args={**cfg.init_args, "kernel_size": kernel})
        ), None
    as_it_is = dict(convert=None, convert_args={}, init="random", init_args={}, recommended="none")
    return replace(cfg, **as_it_is), reason


def recipe_note(plan: RunPlan) -> str:
    """The one line on a run that got the recommended recipe: applied, or not applied and why."""
    model = plan.cfg.model
    if plan.recipe_refused is not None:
        return not_applied_note(model, plan.recipe_refused)
    kernel = plan.cfg.init_args.get("kernel_size")  # set on a recipe only where it adapted to the grid
    return applied_note(model) + (f"; {kernel_note(kernel)}" if kernel else "")


def conversion_in(cfg: TrainConfig) -> Conversion | None:
    """The `convert=` / `convert_args.*` of a run, checked (ConfigError in one line), or None."""
    if cfg.convert is None:
        if cfg.convert_args:
            raise ConfigError(f"convert_args {cfg.convert_args} need convert=gpsa or convert=blend")
        return None
    return conversion_of(cfg.convert, cfg.convert_args)
