"""Training configuration: YAML presets, `key=value` overrides and validation before any work starts.

A preset is a YAML file of flat keys (see `TrainConfig`) shipped in `convinit/configs/` or given as a
path; `extends: NAME` starts from another preset. Overrides are `key=value` strings parsed as YAML
values; `model_args.dim=128` sets one entry of a dict-valued key. Validation rejects unknown keys,
wrong types and impossible values with a one-line ConfigError; the model's own arguments are checked
by constructing it (see `convinit.train.validation.check_model`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from convinit.config.adaptation import adapt_preset_defaults
from convinit.config.recommendation import apply_recommendation
from convinit.errors import ConfigError
from convinit.naming.did_you_mean import suggestion
from convinit.system.atomic import atomic_write_text

CHOICES = {
    "optimizer": ("adam", "adamw", "sgd"),
    "schedule": ("cosine", "constant"),
    "precision": ("auto", "fp32", "tf32", "bf16", "fp16"),
    "subset_order": ("random", "first"),
    "on_nonfinite": ("stop", "skip"),
    "randaugment_policy": ("timm", "torchvision"),
    "data_mode": ("auto", "device", "stream"),
    "compile_mode": ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    "recommended": ("auto", "none", "applied"),
    "attention_kernel": ("sdpa", "small_heads"),
}


@dataclass
class TrainConfig:
    """Every setting of a training run; the resolved copy is saved as `config.yaml` in the run directory."""

    # what to train
    model: str = "simplevit"
    model_args: dict[str, Any] = field(default_factory=dict)
    init: str = "random"
    init_args: dict[str, Any] = field(default_factory=dict)
    # both papers' architectures put into a timm or transformers ViT (convinit.models.convert): gpsa
    # (ConViT's gated positional attention), blend (paper 1's Q/K blend) or gpsa+blend (GPSA in the first
    # blocks, the blend in the rest); null: the model as it is
    convert: str | None = None
    convert_args: dict[str, Any] = field(default_factory=dict)
    # a timm or transformers ViT trained from scratch whose convert and init nobody set gets the recipe
    # docs/results.md finds best for a user's ViT (convinit.config.recommendation): auto; none: the
    # model as it is; applied: what a run's saved config says when it got the recipe's keys
    recommended: str = "auto"
    # data
    dataset: str = "digits"
    data_dir: str | None = None
    download: bool = False
    img_size: int | None = None
    train_fraction: float | None = None
    per_class: int | None = None
    subset_order: str = "random"
    # a validation split for choosing a recipe without the test set: this many images per class held out
    # of the training images the subset left out (else out of the kept ones), evaluated instead of the
    # test set, which the run then never reads; null: evaluate on the test set
    holdout_per_class: int | None = None
    # where batches come from (convinit.data.source): the device-resident copy, or DataLoader
    # workers streaming from disk; auto streams when the decoded set exceeds data_budget_gb
    data_mode: str = "auto"
    data_budget_gb: float | None = None  # None: half the training device's free memory
    workers: int = 8  # streamed path: decoding processes (at most the CPU count)
    repeated_aug: int = 1  # DeiT's repeated augmentation: each image this many times per epoch (DeiT: 3)
    crop_pct: float = 0.875  # streamed evaluation: resize to img_size / crop_pct, centre-crop img_size
    # Hugging Face datasets (dataset=hf, see convinit.data.readers.hf): data_dir= a folder written by
    # save_to_disk, or hf_name= a Hub dataset user/name or a builder such as imagefolder (with data_dir=
    # its files)
    hf_name: str | None = None
    hf_config: str | None = None
    hf_split_train: str = "train"
    hf_split_test: str | None = None  # null: 'test', else 'validation', else hf_test_fraction of train
    hf_test_fraction: float = 0.2  # stratified, seed 0: the same split on every run and resume
    hf_image_column: str | None = None  # null: the dataset's one Image column
    hf_label_column: str | None = None  # null: the dataset's one ClassLabel column
    # optimisation
    epochs: int = 20
    batch_size: int = 128
    # the last partial batch of an epoch: kept (false: every image is trained on every epoch, which a
    # small set needs) or dropped once the set holds more than one batch (true: the papers' code, DeiT's
    # drop_last; the paper presets set it); under DDP it is always dropped
    drop_last: bool = False
    optimizer: str = "adamw"
    lr: float = 1e-3
    lr_base_batch: int | None = None
    weight_decay: float = 0.05
    # beyond the papers (docs/method.md §8): an L2 pull of the Q/K weights towards their values when
    # training starts, added to their gradient as qk_pull * (w - w0); 0: off
    qk_pull: float = 0.0
    momentum: float = 0.9
    warmup_epochs: float = 0.0
    min_lr: float = 0.0
    schedule: str = "cosine"
    label_smoothing: float = 0.0
    clip_grad: float | None = None
    on_nonfinite: str = "stop"  # a NaN/inf loss or gradient: stop with a message, or skip the step
    max_nonfinite_skips: int = 10  # with on_nonfinite=skip: stop after this many skipped steps
    ema_decay: float | None = None
    # hard distillation (DeiT): a trained run or saved model whose argmax is a second target
    teacher: str | None = None
    distill_weight: float = 0.5  # loss = (1 - w) * CE(targets) + w * CE(teacher argmax)
    # augmentation (applied on the device, see convinit.data.augmentation.batch_augment)
    crop_padding: int = 0
    resized_crop_scale: float | None = None  # RandomResizedCrop's smallest area fraction (DeiT: 0.08)
    hflip: bool = False
    randaugment_n: int = 0
    randaugment_m: float = 9.0
    randaugment_mstd: float = 0.0
    # whose RandAugment definitions: timm's (DeiT; m on a 0-10 scale, each op with probability 0.5) or
    # torchvision's (paper 1's RandAugment(2, 14); m a magnitude bin on a 0-30 scale)
    randaugment_policy: str = "timm"
    random_erasing: float = 0.0
    mixup: float = 0.0
    cutmix: float = 0.0
    # analysis trackers evaluated at each evaluation (see convinit.analysis)
    track: list[str] = field(default_factory=list)
    track_every: int = 100  # and every N steps between them, into track.jsonl (0: at evaluations only)
    # experiment trackers beside metrics.jsonl/csv: tensorboard, wandb (see convinit.train.loggers)
    logger: list[str] = field(default_factory=lambda: ["csv"])
    # run
    seed: int = 0
    deterministic: bool = False
    device: str = "auto"
    precision: str = "auto"  # auto: bf16 autocast on CUDA, fp32 elsewhere; fp16 adds a GradScaler; tf32:
    # fp32 with TF32 matmuls on CUDA (also used for what autocast leaves in fp32); fp32: strict IEEE fp32
    # on a CPU, subnormal floats flushed to zero while training and evaluating (system/denormals): impulse
    # init's peaked maps are mostly subnormal, which some CPUs compute many times slower; runs trained
    # before the key existed did not flush (and load as false), the kept grids' presets pin false
    flush_denormal: bool = True
    threads: int | None = None  # CPU threads of this process; null: chosen (see convinit.train.process)
    compile: bool = False  # torch.compile the training forward/backward (checkpoints keep plain keys)
    # torch.compile's mode; auto: reduce-overhead (CUDA graphs, no autotuning) on one GPU, default elsewhere
    compile_mode: str = "auto"
    channels_last: bool = False  # model and batches in channels_last memory format (faster ConvMixer convs)
    # attention of convinit's layers (a converted ViT's too): torch's SDPA, or on a CPU for heads of dim 8 or
    # less the fused kernel of convinit.models.small_heads (16 heads of 4 at 1.2x the time of 4 heads of 16,
    # against 1.9x with SDPA); not the default: it needs a C++ compiler and is exact to float rounding, not
    # bit for bit, so runs kept with SDPA stay reproducible
    attention_kernel: str = "sdpa"
    eval_batch_size: int = 1000
    log_every: int = 10  # steps between reads of the device's running totals (progress, loggers, NaN checks)
    eval_every: int = (
        1  # evaluate on the test set every N epochs (and after the last); 0: after the last only
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


KEYS = [f.name for f in dataclasses.fields(TrainConfig)]
MAX_CROP_PADDING = 64  # pixels on each side of a padded random crop; larger ones crop mostly padding
MAX_THREADS = 1024  # CPU threads of one process; more cannot be started (OpenMP fails to create them)
# RandAugment ops applied in turn to every image (DeiT: 2); the policies hold 14 (torchvision) and 15
# (timm) ops, so beyond 15 ops only repeat, each one more pass over the batch (1e8 hung the first batch)
MAX_RANDAUGMENT_N = 15
# copies of each image per epoch (DeiT: 3); the sampler lists every index this many times, so 1e9 ran
# out of memory, and beyond 16 an epoch is mostly copies of the same images
MAX_REPEATED_AUG = 16
# keys a config.yaml that `train` wrote always holds: without them it was damaged or is not ours
SAVED_KEYS = ("model", "dataset", "epochs", "batch_size", "lr", "seed")


def preset_names() -> list[str]:
    """Names of the presets shipped in convinit/configs (sub-folders as `folder/name`)."""
    root = resources.files("convinit") / "configs"
    names = []
    for path in Path(str(root)).rglob("*.yaml"):
        if path.parent.name == "experiments":  # grids, not training presets (see convinit.experiments)
            continue
        names.append(path.relative_to(Path(str(root))).with_suffix("").as_posix())
    return sorted(names)


def preset_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A shipped preset by name, or a YAML file; a relative file named by `extends:` is looked up
    beside the file that extends it (`relative_to`)."""
    path = Path(name_or_path).expanduser()
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path.resolve()
    shipped = Path(str(resources.files("convinit") / "configs")) / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    if path.suffix in (".yaml", ".yml"):
        raise ConfigError(f"config file {path} does not exist")
    hint = suggestion(name_or_path, preset_names(), "; `convinit configs` lists them")
    raise ConfigError(f"unknown preset {name_or_path!r}{hint}")


def load_preset(
    name_or_path: str, _seen: tuple[str, ...] = (), _relative_to: Path | None = None
) -> dict[str, Any]:
    """The preset's keys, with any `extends:` chain resolved (later files win)."""
    path = preset_path(name_or_path, _relative_to)
    if str(path) in _seen:
        chain = " -> ".join([*_seen, str(path)])
        raise ConfigError(f"preset {name_or_path!r} extends itself in a loop ({chain}); remove one extends:")
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of key: value lines")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    merged = load_preset(str(parent), _seen + (str(path),), path.parent)
    return merge(merged, data)


def read_yaml(path: Path) -> Any:
    """A YAML file's data; one-line ConfigError if it cannot be read, is not UTF-8 or not safe YAML, or is
    no regular file of bounded size (a link to /dev/zero)."""
    from convinit.system.read_back import read_capped

    try:
        return yaml.safe_load(read_capped(path).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8 YAML") from exc
    except yaml.YAMLError as exc:  # includes python/object tags, which safe_load refuses
        raise ConfigError(f"config file {path} is not valid YAML: {' '.join(str(exc).split())}") from exc


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` over `base`; dict-valued keys (model_args, init_args) merge one level deep."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def parse_value(text: str) -> Any:
    """A command-line value as YAML would read it; '1e-3' is a float too (YAML 1.1 wants '1.0e-3')."""
    try:
        value = yaml.safe_load(text) if text != "" else None
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """['epochs=3', 'model_args.dim=64'] -> {'epochs': 3, 'model_args': {'dim': 64}}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value (e.g. epochs=3 or model_args.dim=64)")
        value = parse_value(text)
        if "." in key:
            top, _, sub = key.partition(".")
            out.setdefault(top, {})
            if not isinstance(out[top], dict):
                raise ConfigError(f"override {item!r}: {top} is set both whole and by entry")
            out[top][sub] = value
        else:
            out[key] = value
    return out


def is_optional(annotation: Any) -> bool:
    return isinstance(annotation, types.UnionType) and type(None) in typing.get_args(annotation)


def base_type(annotation: Any) -> type:
    """int for `int | None`, dict for `dict[str, Any]`."""
    if isinstance(annotation, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_origin(annotation) or annotation


def type_name(annotation: Any) -> str:
    names = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
        dict: "a mapping",
        list: "a list",
    }
    return names[base_type(annotation)] + (" or null" if is_optional(annotation) else "")


def coerce(key: str, value: Any, annotation: Any) -> Any:
    """Check `value` against the field's annotation; ints are accepted where numbers are expected."""
    if value is None:
        if is_optional(annotation):
            return None
        raise ConfigError(f"config key {key!r} must be {type_name(annotation)}, got null")
    base = base_type(annotation)
    ok = (
        (base is bool and isinstance(value, bool))
        or (base is int and isinstance(value, int) and not isinstance(value, bool))
        or (base is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (base is str and isinstance(value, str))
        or (base is dict and isinstance(value, dict))
        or (base is list and isinstance(value, list))
    )
    if base is list and isinstance(value, str):  # track=nonlocality or track=a,b
        return [v for v in value.split(",") if v]
    if base is list and ok and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"config key {key!r} must be a list of names, got {value!r}")
    if base is float and ok and not math.isfinite(value):
        raise ConfigError(f"config key {key!r} must be a finite number, got {value!r}")
    if not ok:
        raise ConfigError(
            f"config key {key!r} must be {type_name(annotation)}, got {value!r} ({type(value).__name__})"
        )
    return float(value) if base is float else value


def check_values(cfg: TrainConfig) -> None:
    """Every value within its range, in a fixed order (the first wrong one is the one refused)."""
    check_choices_and_counts(cfg)
    check_ranges(cfg)


def check_choices_and_counts(cfg: TrainConfig) -> None:
    for key, options in CHOICES.items():
        value = getattr(cfg, key)
        if value not in options:
            hint = suggestion(value, options)
            raise ConfigError(f"config key {key!r} must be one of {', '.join(options)}, got {value!r}{hint}")
    positive = ["epochs", "batch_size", "eval_batch_size", "repeated_aug", "log_every", "threads"]
    for key in positive:
        if getattr(cfg, key) is not None and getattr(cfg, key) < 1:
            raise ConfigError(f"config key {key!r} must be at least 1, got {getattr(cfg, key)}")
    if cfg.lr <= 0:
        raise ConfigError(f"config key 'lr' must be positive, got {cfg.lr}")
    if cfg.min_lr >= cfg.lr:
        raise ConfigError(
            f"min_lr ({cfg.min_lr}) must be below lr ({cfg.lr}): the schedule decays from lr to it"
        )
    if cfg.clip_grad is not None and cfg.clip_grad <= 0:
        raise ConfigError(
            f"config key 'clip_grad' must be positive or null (no clipping), got {cfg.clip_grad}"
        )
    if not 0 <= cfg.seed < 2**63:
        raise ConfigError(f"config key 'seed' must be in [0, 2**63), got {cfg.seed}")
    if cfg.threads is not None and cfg.threads > MAX_THREADS:
        raise ConfigError(
            f"config key 'threads' must be at most {MAX_THREADS}, got {cfg.threads}; "
            "leave it null to choose from the cores"
        )
    if cfg.crop_padding > MAX_CROP_PADDING:
        raise ConfigError(
            f"config key 'crop_padding' must be at most {MAX_CROP_PADDING} pixels, got {cfg.crop_padding}"
        )
    if cfg.per_class is not None and cfg.per_class < 1:
        raise ConfigError(
            f"config key 'per_class' must be at least 1 (images per class) or null (all), got {cfg.per_class}"
        )
    if cfg.max_nonfinite_skips < 0:
        raise ConfigError(
            f"config key 'max_nonfinite_skips' must be 0 or more, got {cfg.max_nonfinite_skips}"
        )
    for key, largest, why in (
        ("randaugment_n", MAX_RANDAUGMENT_N, "the policies hold 14-15 ops; DeiT applies 2"),
        ("repeated_aug", MAX_REPEATED_AUG, "copies of each drawn image in an epoch; DeiT uses 3"),
    ):
        if getattr(cfg, key) > largest:
            raise ConfigError(
                f"config key {key!r} must be at most {largest} ({why}), got {getattr(cfg, key)}"
            )


def check_ranges(cfg: TrainConfig) -> None:
    nonnegative = [
        "weight_decay",
        "qk_pull",
        "warmup_epochs",
        "min_lr",
        "crop_padding",
        "randaugment_n",
        "mixup",
        "cutmix",
        "randaugment_mstd",
        "label_smoothing",
    ]
    for key in nonnegative:
        if getattr(cfg, key) < 0:
            raise ConfigError(f"config key {key!r} must not be negative, got {getattr(cfg, key)}")
    if not 0 <= cfg.distill_weight <= 1:
        raise ConfigError(f"config key 'distill_weight' must be in [0, 1], got {cfg.distill_weight}")
    for key in ("eval_every", "track_every"):
        if getattr(cfg, key) < 0:
            raise ConfigError(f"config key {key!r} must be 0 or more, got {getattr(cfg, key)}")
    unit = ["label_smoothing", "random_erasing", "ema_decay"]
    for key in unit:
        value = getattr(cfg, key)
        if value is not None and not 0 <= value < 1:
            raise ConfigError(f"config key {key!r} must be in [0, 1), got {value}")
    if not 0 < cfg.crop_pct <= 1:
        raise ConfigError(f"config key 'crop_pct' must be in (0, 1], got {cfg.crop_pct}")
    if cfg.workers < 0:
        raise ConfigError(f"config key 'workers' must be 0 or more, got {cfg.workers}")
    if cfg.data_budget_gb is not None and not cfg.data_budget_gb >= 0:
        raise ConfigError(f"config key 'data_budget_gb' must be 0 or more, got {cfg.data_budget_gb}")
    if cfg.resized_crop_scale is not None and not 0 < cfg.resized_crop_scale <= 1:
        raise ConfigError(f"config key 'resized_crop_scale' must be in (0, 1], got {cfg.resized_crop_scale}")
    if cfg.train_fraction is not None and not 0 < cfg.train_fraction <= 1:
        raise ConfigError(f"config key 'train_fraction' must be in (0, 1], got {cfg.train_fraction}")
    if cfg.train_fraction is not None and cfg.per_class is not None:
        raise ConfigError("set train_fraction or per_class, not both")
    if cfg.img_size is not None and cfg.img_size < 1:
        raise ConfigError(f"config key 'img_size' must be a positive integer, got {cfg.img_size}")
    if cfg.warmup_epochs >= cfg.epochs and cfg.warmup_epochs > 0:
        raise ConfigError(f"warmup_epochs ({cfg.warmup_epochs}) must be shorter than epochs ({cfg.epochs})")
    check_randaugment(cfg)
    if cfg.device != "auto" and cfg.device.split(":")[0] not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device must be auto, cpu, cuda[:N] or mps, got {cfg.device!r}")


def check_randaugment(cfg: TrainConfig) -> None:
    """m is read on the scale of the policy's definitions: timm's 0-10, torchvision's bins 0-30."""
    if not cfg.randaugment_n:
        return
    if cfg.randaugment_policy == "timm" and not 0 < cfg.randaugment_m <= 10:
        raise ConfigError(
            f"randaugment_m must be in (0, 10] on timm's scale, got {cfg.randaugment_m}; "
            "for torchvision's 0-30 scale set randaugment_policy=torchvision"
        )
    if cfg.randaugment_policy == "torchvision":
        if cfg.randaugment_m != int(cfg.randaugment_m) or not 0 <= cfg.randaugment_m <= 30:
            raise ConfigError(
                f"randaugment_m must be an integer bin in [0, 30] for torchvision, got {cfg.randaugment_m}"
            )
        if cfg.randaugment_mstd:
            raise ConfigError(
                "randaugment_mstd is timm's magnitude noise; torchvision's RandAugment has none"
            )


def build_config(
    values: dict[str, Any], user_keys: set[str] | None = None, preset: str = "default"
) -> TrainConfig:
    """Validate a mapping of keys into a TrainConfig (one-line ConfigError on the first problem).

    With `user_keys` (the keys the user overrode on top of `preset`), the preset's values that collide
    with them adapt, with one line on stderr each (see convinit.config.adaptation).
    """
    checked = checked_values(values)
    if user_keys is not None:
        defaults = TrainConfig().to_dict()
        preset_alone = checked_values(load_preset(preset))
        checked = adapt_preset_defaults(
            {**defaults, **checked}, {**defaults, **preset_alone}, user_keys, preset, say_once
        )
    cfg = TrainConfig(**checked)
    check_values(cfg)
    return cfg


def checked_values(values: dict[str, Any]) -> dict[str, Any]:
    """Known keys, each of its field's type (one-line ConfigError naming the first that is not)."""
    unknown = [k for k in values if k not in KEYS]
    if unknown:
        key = unknown[0]
        hint = suggestion(key, KEYS, f"; valid keys: {', '.join(KEYS)}", n=1)
        raise ConfigError(f"unknown config key {key!r}{hint}")
    hints = typing.get_type_hints(TrainConfig)
    return {key: coerce(key, value, hints[key]) for key, value in values.items()}


_SAID: set[str] = set()
_PENDING: list[str] = []


def say_once(message: str) -> None:
    """One line per adapted default, kept until `say_notes` (a grid resolving one preset many times
    says it once): a note about a config that is then refused would only stand before the error."""
    if message not in _SAID:
        _SAID.add(message)
        _PENDING.append(message)


def unsay(message: str) -> bool:
    """Withdraw a kept note not yet printed (the plan says the recommended recipe's outcome once the
    model is known); whether it was kept."""
    _SAID.discard(message)
    if message not in _PENDING:
        return False
    _PENDING.remove(message)
    return True


def say_notes() -> None:
    """Print the notes kept so far on stderr, once the config is known to be usable (validation passed,
    or the command succeeded); `convinit.train.validate` and the grid runner call it."""
    for message in _PENDING:
        print(f"convinit: {message}", file=sys.stderr)
    _PENDING.clear()


def drop_notes() -> None:
    """Forget the kept notes: the command failed, and its error is the one line that matters."""
    _PENDING.clear()


def resolve_config(
    preset: str | None = None, overrides: list[str] | dict[str, Any] | None = None
) -> TrainConfig:
    """Defaults <- preset (default: `default_preset`) <- overrides, validated; the preset's values that
    collide with an override adapt to it (a warm-up as long as a shortened run is scaled down)."""
    extra = parse_overrides(overrides) if isinstance(overrides, list) else (overrides or {})
    if extra.get("recommended") == "applied":  # a saved run's record of the recipe, never a choice
        raise ConfigError(
            "recommended=applied is what a saved run records once the recipe was applied, not a value to "
            "set: recommended=auto (the default) applies the recipe where it fits, recommended=none trains "
            "the model as you wrote it"
        )
    if preset is None and "data_dir" in extra and "dataset" not in extra:  # a folder is never ignored
        extra = {**extra, "dataset": "folder"}
        say_once(
            f"data_dir={extra['data_dir']} with no dataset=: trained as dataset=folder (one subfolder of "
            "images per class); name dataset= for another reader (convinit datasets data_dir=... says which)"
        )
    if preset is None and extra.get("recommended") == "none" and default_preset(extra) == "own_data":
        preset = "default"  # own_data's blend and impulse init are convinit's recipe for its own ViT
        say_once(
            "recommended=none: your images train the default preset's plain ViT at its default init "
            "(own_data's model_args.qk_input=blend, model_args.alpha=0.1 and init=impulse left out)"
        )
    if preset is None and default_preset(extra) == "own_data" and not {"init", "model"} & set(extra):
        say_once(
            "your own images train preset own_data: a small ViT with paper 1's blend and impulse init, the "
            "method docs/results.md shows best at a few hundred images; init=random or --config default "
            "for the baseline"
        )
    named = preset
    preset = preset or default_preset(extra)
    values = load_preset(preset)
    model = extra.get("model")
    if isinstance(model, str) and model.startswith(("timm:", "hf:")) and values.get("model_args"):
        # the preset's model_args are its own model's (dim, depth...): a timm / transformers model
        # starts from its own defaults, with the user's model_args on top
        say_once(model_args_note(model, preset, values, extra.get("model_args")))
        values = {key: value for key, value in values.items() if key != "model_args"}
    # a preset named with --config chose its method; the implicit one (own_data) chose it for its own model
    chosen = set(extra) | (set(values) if named is not None else set())
    values = apply_recommendation(merge(values, extra), chosen, say_once)
    return build_config(values, set(extra), preset)


OWN_DATA = ("folder", "hf")  # datasets that are a user's own images


def default_preset(overrides: dict[str, Any]) -> str:
    """The preset of a run without one: `own_data` (a ViT with the convolutional bias, the method
    docs/results.md shows best at a few hundred images) for a user's own images, `default` otherwise."""
    return "own_data" if overrides.get("dataset") in OWN_DATA else "default"


def model_args_note(model: str, preset: str, values: dict[str, Any], given: Any) -> str:
    """What happens to model_args when an external model replaces the preset's: the preset's own are
    dropped (they are another model's), the user's `model_args.KEY=...` are passed on."""
    dropped = ", ".join(f"{key}={value}" for key, value in values["model_args"].items())
    mine = ", ".join(f"model_args.{key}" for key in given) if isinstance(given, dict) and given else ""
    kept = f"yours ({mine}) are passed to it" if mine else f"{model} starts from its own defaults"
    ours = f"the model_args of preset {preset} (for {values.get('model')}: {dropped})"
    return f"model {model}: {ours} are dropped; {kept}"


def save_config(cfg: TrainConfig, path: Path) -> None:
    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def load_config(path: Path) -> TrainConfig:
    """A run directory's saved config; refused in one line when damaged, never filled with defaults."""
    values = read_yaml(path)
    if isinstance(values, dict):  # written before these keys existed: as such runs were trained
        values = {"drop_last": True, "flush_denormal": False, **values}
    missing = [k for k in SAVED_KEYS if k not in values] if isinstance(values, dict) else list(SAVED_KEYS)
    if missing:
        what = "is empty" if values is None else f"lacks {', '.join(missing)}"
        raise ConfigError(
            f"config {path} {what}: it is damaged or was not written by convinit train; "
            "restore it, or start the run over with --overwrite"
        )
    return build_config(values)


def config_differences(a: TrainConfig, b: TrainConfig) -> list[str]:
    """Keys whose values differ between two configs."""
    da, db = a.to_dict(), b.to_dict()
    return [k for k in KEYS if da[k] != db[k]]
