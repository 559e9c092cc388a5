"""A run's `model_args` checked against the model's own signature or config before anything is built.

Every family is checked the same way: convinit's presets by their builder's signature, `timm:NAME` by
its model class's constructor, `hf:vit` by `ViTConfig`'s own fields. A key the model does not take is
refused with a did-you-mean (transformers would keep a typo as a config attribute and train the default
model); a key convinit sets itself (the dataset's classes and channels, the image size, weights to
load) is refused with the key that sets it; a text where the default is a number, or a negative count,
is refused by name. What only the constructor can judge is left to it, and a constructor that fails is
blamed on the key that makes it fail (`culprits`), so the refusal names it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from convinit.errors import ConfigError
from convinit.models.registry import SHAPE_ARGUMENTS, model_arguments
from convinit.naming.did_you_mean import suggestion

WEIGHTS = "convinit starts from the init= scheme, not from weights named in model_args"
CLASSES = "the dataset's classes set it"
SIZE = "the config key img_size= sets it (default: the dataset's image size)"
CHANNELS = "the dataset's channels set it"
# keys of some family's constructor or config that convinit sets itself, and what sets them
SET_BY_CONVINIT = {
    "num_classes": CLASSES, "num_labels": CLASSES, "id2label": CLASSES, "label2id": CLASSES,
    "img_size": SIZE, "image_size": SIZE, "in_chans": CHANNELS, "num_channels": CHANNELS,
    "pretrained": WEIGHTS, "pretrained_cfg": WEIGHTS, "pretrained_cfg_overlay": WEIGHTS,
    "checkpoint_path": WEIGHTS, "cache_dir": WEIGHTS,
    "dtype": "the config key precision= sets it", "torch_dtype": "the config key precision= sets it",
}  # fmt: skip
# hf:vit's sizes that must be at least 1 (transformers builds a ViT with no layers from -1)
HF_POSITIVE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "patch_size")
HF_EXTRA = {"attn_implementation": None}  # a model setting transformers takes besides the config fields


def check_model_arguments(name: str, model_args: dict[str, Any]) -> None:
    """ConfigError, in one line naming the key, for a `model_args` key that model `name` does not take,
    that convinit sets itself, or whose value cannot be right (a text for a number, a negative count)."""
    for key in model_args:
        if key in SET_BY_CONVINIT:
            raise ConfigError(f"model_args.{key} is not passed to the model: {SET_BY_CONVINIT[key]}")
    accepted = accepted_defaults(name)
    if accepted is None:  # a constructor taking **kwargs: only the constructor can judge
        return
    accepted = {k: v for k, v in accepted.items() if k not in SET_BY_CONVINIT}
    for key in model_args:
        if key not in accepted:
            listing = f"; it takes: {', '.join(accepted)}"
            raise ConfigError(f"model {name!r} takes no argument {key}{suggestion(key, accepted, listing)}")
    for key, value in model_args.items():
        check_value(key, value, accepted[key])
    if name.startswith("hf:"):
        check_transformers_values(accepted, model_args)


def accepted_defaults(name: str) -> dict[str, Any] | None:
    """The arguments model `name` takes that a run may set, with their defaults; None if its
    constructor takes any keyword (`**kwargs`)."""
    if name.startswith("timm:"):
        return timm_defaults(name.partition(":")[2])
    if name.startswith("hf:"):
        return transformers_defaults(name.partition(":")[2])
    params = model_arguments(name)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return {k: p.default for k, p in params.items() if k not in SHAPE_ARGUMENTS}


def signature_defaults(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """`fn`'s keyword parameters and defaults (None if it takes **kwargs); `self` left out."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return named_defaults(fn)


def named_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    """`fn`'s named keyword parameters and defaults, a **kwargs beside them ignored; `self` left out."""
    keywords = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(fn).parameters
    return {k: p.default for k, p in params.items() if p.kind in keywords and k != "self"}


def timm_defaults(name: str) -> dict[str, Any] | None:
    """What timm model `name`'s class takes: read from the class of a model built on the meta device
    (timm's entrypoints pass their keywords on to it); None if it cannot be built there."""
    import torch

    from convinit.models.external import build_timm

    try:
        with torch.device("meta"):
            model = build_timm(name)
    except ConfigError:
        raise
    except Exception:
        return None
    return signature_defaults(type(model).__init__)


def transformers_defaults(name: str) -> dict[str, Any] | None:
    """hf:vit's own configuration fields (ViTConfig's, not those every transformers config shares)."""
    from convinit.models.external import transformers_config_class

    config_class = transformers_config_class(name)
    # transformers 4's configs name their fields and pass **kwargs on to PretrainedConfig; 5's name them all
    own = named_defaults(config_class.__init__)
    shared = named_defaults(config_class.__mro__[1].__init__)
    return {k: v for k, v in own.items() if k not in shared} | HF_EXTRA


def check_value(key: str, value: Any, default: Any) -> None:
    """A value of a type the default's type rules out, or a negative count, refused by name."""
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    if numeric and isinstance(value, (str, bool)):
        raise ConfigError(f"model_args.{key}={value!r} is not a number (default {default})")
    if isinstance(default, bool) and not isinstance(value, bool):
        raise ConfigError(f"model_args.{key}={value!r} is not true or false (default {default})")
    if isinstance(default, int) and not isinstance(default, bool) and default > 0:
        if isinstance(value, int) and value < 0:
            raise ConfigError(
                f"model_args.{key}={value} is negative; it counts something (default {default})"
            )


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_transformers_values(defaults: dict[str, Any], model_args: dict[str, Any]) -> None:
    """What transformers' ViT does not check itself: a number where its config has one (it keeps a
    list there and fails later in a TypeError; only patch_size may be a pair), sizes of at least 1, a
    width the heads divide, a known activation, dropout probabilities."""
    from transformers.activations import ACT2FN

    for key, value in model_args.items():
        default = defaults[key]
        pair = key == "patch_size" and isinstance(value, (list, tuple)) and len(value) == 2
        if is_number(default) and not is_number(value) and not pair:
            kind = "an integer" if isinstance(default, int) else "a number"
            raise ConfigError(f"model_args.{key}={value!r} must be {kind} (default {default})")
    values = {**defaults, **model_args}
    for key in HF_POSITIVE:
        sizes = values[key] if isinstance(values[key], (list, tuple)) else [values[key]]
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise ConfigError(f"model_args.{key}={values[key]!r} must be a positive integer")
    width, heads = values["hidden_size"], values["num_attention_heads"]
    if width % heads:
        raise ConfigError(
            f"model_args.hidden_size={width} is not divisible by model_args.num_attention_heads={heads}"
        )
    act = values["hidden_act"]
    if not isinstance(act, str) or act not in ACT2FN:
        raise ConfigError(f"model_args.hidden_act={act!r} is not an activation transformers knows"
                          f"{suggestion(str(act), list(ACT2FN), '; e.g. gelu, relu, silu')}")  # fmt: skip
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        if not 0 <= values[key] <= 1:
            raise ConfigError(f"model_args.{key}={values[key]} is not a probability between 0 and 1")


def culprits(construct: Callable[[dict[str, Any]], Any], model_args: dict[str, Any]) -> list[str]:
    """The keys of `model_args` that the constructor refuses on their own (each tried alone), else all
    of them: a refusal then names what to change.

    Tried on the meta device (shapes only): a search on the error path never allocates a model, however
    wide the arguments make it (a model the meta device cannot build at all fails with every key, and
    every key is named)."""
    import torch

    def fails(args: dict[str, Any]) -> bool:
        try:
            with torch.device("meta"):
                construct(args)
        except Exception:
            return True
        return False

    return [key for key, value in model_args.items() if fails({key: value})] or list(model_args)


def refusal(name: str, model_args: dict[str, Any], keys: list[str], exc: BaseException) -> ConfigError:
    """One line: which `model_args` model `name` cannot be built with, and the constructor's reason."""
    detail = " ".join(str(exc).split())
    if isinstance(exc, (KeyError, IndexError)) or not detail:
        detail = f"{type(exc).__name__} {detail}".strip()
    given = ", ".join(f"model_args.{k}={model_args[k]!r}" for k in keys) or "its default arguments"
    return ConfigError(f"model {name!r} cannot be built with {given}: {detail[:300]}")
