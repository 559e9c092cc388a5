"""Shareable models through huggingface_hub: `save_pretrained`, `from_pretrained` and `push_to_hub`.

A saved model is a folder or a Hub repository holding `config.json` (the registry preset, its arguments
and the data's classes and normalisation), `model.safetensors` and a model card `README.md`.
`PyTorchModelHubMixin` saves, downloads (honouring its cache and `HF_HUB_OFFLINE=1`) and pushes; this
module says what the config holds, checks a folder before anything is built from it (a damaged or
foreign folder is one `ConfigError`, never a traceback or a half-loaded model) and writes folders
atomically. Nothing is unpickled: the config is JSON and the weights are safetensors.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from huggingface_hub import ModelCard, PyTorchModelHubMixin
from huggingface_hub.utils import (  # here from 0.23 on (.errors lacks them in 0.23 and 0.24)
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
)
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from convinit.errors import ConfigError
from convinit.models.arguments import check_model_arguments, culprits, refusal
from convinit.models.convert import conversion_of, convert
from convinit.models.external import build_model_by_name, is_external
from convinit.models.registry import SHAPE_ARGUMENTS, list_models
from convinit.system.folder_publish import publish_folder
from convinit.system.read_back import short_repr

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
FOLDER_FILES = (CONFIG, WEIGHTS, CARD)  # what a saved model folder holds (and may be replaced)
MAX_SIDE = (
    4096  # pixels: a larger img_size in a config is damage or a trap (position tables grow as its square)
)
MAX_CHANNELS = 64  # image channels a saved model may take
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")  # timm's names
MAX_NESTING = 32  # levels of lists and objects a config.json may hold (a convinit one has 3)
MAX_HEADER = 100 << 20  # bytes; safetensors' own limit on the JSON header
MAX_INT, MAX_DEPTH = 1 << 20, 4096  # larger integer arguments would hang or exhaust memory while building
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
USAGE = """```python
import convinit

model = convinit.from_pretrained("THIS_FOLDER_OR_REPO")  # a folder, or user/name on the Hub
model.pretrained_config["classes"], model.pretrained_config["mean"]  # labels and normalisation
```
"""
HUB_ERRORS = (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError, ValueError)
REEXPORT = "the folder was edited or written by another version: export the model again"


class PretrainedMixin(
    PyTorchModelHubMixin,
    library_name="convinit",
    pipeline_tag="image-classification",
    tags=["convinit", "vision"],
):
    """`save_pretrained` / `from_pretrained` / `push_to_hub` from huggingface_hub for convinit models.

    The config is the registry record (`model.model_name`, `model.model_kwargs`) plus metadata such as
    `classes`, `mean` and `std`; `from_pretrained` rebuilds the preset with `create_model`.
    """

    def save_pretrained(
        self,
        save_directory: str | Path,
        *,
        config: dict[str, Any] | None = None,
        model_card_kwargs: dict[str, Any] | None = None,
        push_to_hub: bool = False,
        repo_id: str | None = None,
        **metadata: Any,
    ) -> Path:
        """Write the folder atomically (metadata: classes, mean, std, dataset ... go into config.json)."""
        config = hub_config(self, **(config or {}), **metadata)
        parent = super()

        def write(folder: Path) -> None:
            parent.save_pretrained(folder, config=config, model_card_kwargs=model_card_kwargs)

        directory = publish_folder(Path(save_directory), write, kept=FOLDER_FILES)
        if push_to_hub:
            self.push_to_hub(repo_id or directory.name, config=config, model_card_kwargs=model_card_kwargs)
        return directory

    def generate_model_card(self, *args: Any, **kwargs: Any) -> ModelCard:
        """The card a run's export attached (`model.model_card`), else one that describes the preset."""
        text = getattr(self, "model_card", None) or default_model_card(hub_config(self))
        return ModelCard(text)

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: str | None,
        cache_dir: str | Path | None,
        force_download: bool,
        local_files_only: bool,
        token: str | bool | None,
        config: dict[str, Any] | None = None,
        map_location: str = "cpu",
        **_config_entries: Any,
    ) -> nn.Module:
        if config is None:
            raise ConfigError(f"{model_id} holds no {CONFIG}; pass a folder written by save_pretrained")
        if Path(model_id).is_dir():
            weights = Path(model_id) / WEIGHTS
        else:
            from huggingface_hub import hf_hub_download

            weights = Path(hf_hub_download(
                model_id, WEIGHTS, revision=revision, cache_dir=cache_dir, force_download=force_download,
                token=token, local_files_only=local_files_only,
            ))  # fmt: skip
        model = load_checked(config, weights, model_id, map_location)
        if cls is not PretrainedMixin and not isinstance(model, cls):  # timm / transformers: not a mixin
            raise ConfigError(f"{model_id} holds a {type(model).__name__}, not a {cls.__name__}")
        return model


def hub_config(model: nn.Module, /, **metadata: Any) -> dict[str, Any]:
    """What config.json holds: the preset and its arguments (always the model's own), then metadata."""
    if not hasattr(model, "model_name"):
        raise ConfigError(
            "save_pretrained needs a model built with convinit.create_model (it records the preset)"
        )
    kwargs = dict(model.model_kwargs)
    if isinstance(kwargs.get("img_size"), tuple):
        kwargs["img_size"] = list(kwargs["img_size"])
    extra = {**getattr(model, "pretrained_config", {}), **metadata}
    conversion = getattr(model, "conversion", None)  # convinit.models.convert: rebuilt by build_model
    return {
        "model": model.model_name,
        "model_args": kwargs,
        **({"convert": conversion} if conversion is not None else {}),
        **{k: v for k, v in extra.items() if k not in ("model", "model_args", "convert")},
    }


def default_model_card(config: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in config["model_args"].items())
    return (
        "---\nlibrary_name: convinit\npipeline_tag: image-classification\ntags: [convinit, vision]\n---\n\n"
        f"# {config['model']}\n\n`convinit.create_model({config['model']!r}, {args})`\n\n"
        f"{USAGE}"
    )


def save_pretrained(model: nn.Module, directory: str | Path, **metadata: Any) -> Path:
    """Write config.json, model.safetensors and README.md; metadata (classes, mean, std) joins the config.

    A timm or transformers model that convinit built (`model=timm:NAME`, `model=hf:vit`) is written the
    same way, with its own state dict as the weights (so timm loads a timm model's file as it is)."""
    if isinstance(model, PretrainedMixin):
        return model.save_pretrained(directory, **metadata)
    config = hub_config(model, **metadata)  # the one-line error for a model not built by create_model
    if not is_external(config["model"]):
        raise ConfigError(f"{type(model).__name__} is not a convinit model; build it with create_model")

    def write(folder: Path) -> None:
        (folder / CONFIG).write_text(json.dumps(config, indent=2))
        save_model(model, str(folder / WEIGHTS))
        (folder / CARD).write_text(getattr(model, "model_card", None) or default_model_card(config))

    return publish_folder(Path(directory), write, kept=FOLDER_FILES)


def push_to_hub(model: nn.Module, repo_id: str) -> None:
    """Upload the model's folder (config, weights, card) to the Hub repository `repo_id`: through the
    mixin for convinit's models, the same folder uploaded for a timm or transformers one."""
    if isinstance(model, PretrainedMixin):
        model.push_to_hub(repo_id)
        return
    from huggingface_hub import HfApi

    api = HfApi()
    repo = api.create_repo(repo_id=repo_id, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_pretrained(model, Path(tmp) / "model")
        api.upload_folder(repo_id=repo, repo_type="model", folder_path=folder, commit_message="Push model")


def read_pretrained_config(path: Path, source: str) -> dict[str, Any]:
    """config.json as a dict, or a one-line ConfigError saying what is wrong with it."""
    if not path.is_file():
        raise ConfigError(f"{source} holds no {CONFIG}; pass a folder written by save_pretrained")
    try:
        config = json.loads(path.read_bytes().decode("utf-8"))
    except RecursionError as exc:  # nesting deeper than the interpreter's stack
        raise ConfigError(f"{source}: {CONFIG} is nested too deeply to read; export the model again") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{source}: {CONFIG} is not readable JSON ({exc}); export the model again") from exc
    check_config(config, source)
    return config


def check_config(config: Any, source: str) -> None:
    """Every field from_pretrained relies on, checked before any model is built."""
    where = f"{source}: {CONFIG}"
    if not isinstance(config, dict):
        raise ConfigError(f"{where} must hold a JSON object, got {type(config).__name__}")
    if nesting_depth(config) > MAX_NESTING:  # printing or building from it would exhaust the stack
        raise ConfigError(f"{where} is nested over {MAX_NESTING} levels deep; export the model again")
    name, args = config.get("model"), config.get("model_args")
    if not isinstance(name, str) or not (name in list_models() or is_external(name)):
        raise ConfigError(f"{where} names no convinit model ('model': {name!r}); see `convinit models`")
    if not isinstance(args, dict):
        raise ConfigError(f"{where} lacks 'model_args' (the preset's arguments); export the model again")
    reserved = set(config) & set(inspect.signature(PretrainedMixin._from_pretrained).parameters)
    if reserved:
        raise ConfigError(f"{where} holds reserved keys {sorted(reserved)}; export the model again")
    huge = next(
        (k for k, v in args.items() if is_count(v) and v > (MAX_DEPTH if "depth" in k else MAX_INT)), None
    )
    if huge is not None:
        raise ConfigError(f"{where}: model_args.{huge}={args[huge]} is beyond any model convinit saves")
    num_classes, in_chans = args.get("num_classes"), args.get("in_chans")
    if not is_count(num_classes) or num_classes < 2:
        raise ConfigError(f"{where}: model_args.num_classes must be an integer >= 2, got {num_classes!r}")
    if not is_count(in_chans) or in_chans > MAX_CHANNELS:
        raise ConfigError(
            f"{where}: model_args.in_chans must be an integer in 1..{MAX_CHANNELS}, got {in_chans!r}"
        )
    for value in (args.get("img_size"), config.get("img_size", args.get("img_size"))):
        if image_sides(value) is None:
            raise ConfigError(f"{where}: img_size must be 1..{MAX_SIDE} pixels (or [h, w]), got {value!r}")
    if "img_size" in config and image_sides(config["img_size"]) != image_sides(args["img_size"]):
        raise ConfigError(
            f"{where}: img_size {config['img_size']!r} disagrees with model_args.img_size "
            f"{args['img_size']!r}, the size the model was built for; export the model again"
        )
    check_preprocess(config.get("preprocess"), where)
    classes = config.get("classes")
    if classes is not None and (
        not isinstance(classes, list)
        or len(classes) != num_classes
        or not all(isinstance(c, str) for c in classes)
    ):
        raise ConfigError(f"{where}: 'classes' must list {num_classes} class names (model_args.num_classes)")
    if "convert" in config:
        check_conversion(config["convert"], where)
    for key in ("mean", "std"):
        values = config.get(key)
        if values is not None and (
            not isinstance(values, list)
            or len(values) != in_chans
            or not all(is_number(v) and (key == "mean" or v > 0) for v in values)
        ):
            raise ConfigError(f"{where}: {key!r} must list {in_chans} finite numbers (positive for std)")


def check_conversion(conversion: Any, where: str) -> None:
    """A folder's `convert` (`convinit.models.convert`): {kind: gpsa | blend, and that kind's options}."""
    if not isinstance(conversion, dict):
        raise ConfigError(
            f"{where}: 'convert' must be a mapping with a kind (gpsa or blend); export the model again"
        )
    options = {key: value for key, value in conversion.items() if key != "kind"}
    try:
        conversion_of(conversion.get("kind"), options)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}; export the model again") from exc


def image_sides(value: Any) -> tuple[int, int] | None:
    """(h, w) of an img_size entry (n or [h, w]) within 1..MAX_SIDE pixels, else None."""
    sides = value if isinstance(value, list) and len(value) == 2 else [value, value]
    return tuple(sides) if all(is_count(s) and s <= MAX_SIDE for s in sides) else None


def check_preprocess(how: Any, where: str) -> None:
    """`preprocess`: how an image file becomes the model's input (`convinit.runs.preprocessing_record`)."""
    problem = preprocess_problem(how)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}; export the model again")


def preprocess_problem(how: Any) -> str | None:
    """What is wrong with a `preprocess` entry (None: a folder saved without one, resized to img_size)."""
    if how is None:
        return None
    if not isinstance(how, dict) or how.get("resize") not in ("stretch", "center_crop"):
        return "'preprocess' must name resize 'stretch' or 'center_crop'"
    if how["resize"] == "stretch":
        sides = how.get("decode_size")
        if not isinstance(sides, list) or image_sides(sides) is None:
            return f"preprocess.decode_size must be [h, w] of 1..{MAX_SIDE} pixels, got {short_repr(sides)}"
        return None
    size, pct = how.get("crop_size"), how.get("crop_pct")
    if not (is_count(size) and is_number(pct) and 0 < pct <= 1 and size / pct <= MAX_SIDE):
        return (
            f"preprocess needs crop_size 1..{MAX_SIDE} and crop_pct in (0, 1], got crop_size "
            f"{short_repr(size)}, crop_pct {short_repr(pct)}"
        )
    if how.get("interpolation") not in INTERPOLATIONS:
        return (
            f"preprocess.interpolation must be one of {', '.join(INTERPOLATIONS)}, "
            f"got {short_repr(how.get('interpolation'))}"
        )
    return None


def nesting_depth(value: Any) -> int:
    """How deeply JSON lists and objects nest in `value`, counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            todo += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def weight_shapes(weights: Path, source: str) -> dict[str, list[int]]:
    """Tensor names and shapes from the safetensors header, after checking that the file holds every
    byte the header promises (a cut-short file would crash the memory-mapped load with SIGBUS)."""
    if not weights.is_file():
        raise ConfigError(f"{source} holds no {WEIGHTS}; export the model again")
    size = weights.stat().st_size
    try:
        with open(weights, "rb") as f:
            length = int.from_bytes(f.read(8), "little") if size >= 8 else -1
            header = json.loads(f.read(length)) if 2 <= length <= min(size - 8, MAX_HEADER) else None
        tensors = (
            {k: v for k, v in header.items() if k != "__metadata__"} if isinstance(header, dict) else None
        )
        end = (
            max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
            if tensors is not None
            else -1
        )
        if tensors is None or 8 + length + end != size:
            raise ValueError(
                f"{size} bytes where the header promises {8 + length + end}" if tensors else "no header"
            )
        return {key: [int(n) for n in value["shape"]] for key, value in tensors.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(
            f"{source}: {WEIGHTS} is not a whole safetensors file ({' '.join(str(exc).split())}); convinit "
            "loads only safetensors, never pickles: export the model again"
        ) from exc


def build_model(config: dict[str, Any], source: str, device: str | None = None) -> nn.Module:
    args = dict(config["model_args"])
    if isinstance(args.get("img_size"), list):
        args["img_size"] = tuple(args["img_size"])
    try:
        with torch.device(device) if device else contextlib.nullcontext():
            model = build_model_by_name(config["model"], **args)
            if (
                config.get("convert") is not None
            ):  # the architecture the run put into a timm / transformers ViT
                convert(model, **config["convert"])
            return model
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    except Exception as exc:  # whatever a constructor raises for a tampered config (KeyError, ImportError)
        if device == "meta":
            raise
        raise folder_refusal(config, source, exc) from exc


def folder_args(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A folder's `model_args` split into the data's shape and what a run would set in `model_args`."""
    args = dict(config["model_args"])
    if isinstance(args.get("img_size"), list):
        args["img_size"] = tuple(args["img_size"])
    shape = {key: args.pop(key) for key in SHAPE_ARGUMENTS if key in args}
    return shape, args


def check_folder_model_args(config: dict[str, Any], source: str) -> None:
    """The trainer's own checks of `model_args` (`convinit.models.arguments`), run on a folder's: a key the
    model does not take, one convinit sets itself, a text for a number, an impossible `hf:vit` size."""
    _, args = folder_args(config)
    try:
        check_model_arguments(config["model"], args)
    except Exception as exc:  # ConfigError naming the field; anything else is a value the checks choke on
        detail = " ".join(str(exc).split())[:300]
        if not isinstance(exc, ConfigError):
            detail = f"model_args cannot be checked ({type(exc).__name__}: {detail})"
        raise ConfigError(f"{source}: {CONFIG} is damaged: {detail}; {REEXPORT}") from exc


def folder_refusal(config: dict[str, Any], source: str, exc: BaseException) -> ConfigError:
    """One line for a folder whose model cannot be built: the folder, the `model_args` fields the
    constructor refuses (`culprits`, as the trainer finds them) and the constructor's reason."""
    shape, args = folder_args(config)
    keys = culprits(lambda given: build_model_by_name(config["model"], **shape, **given), args)
    return ConfigError(
        f"{source}: {CONFIG} is damaged: {refusal(config['model'], args, keys, exc)}; {REEXPORT}"
    )


def expected_shapes(config: dict[str, Any], source: str) -> dict[str, list[int]] | None:
    """The state dict's shapes from a model built on the meta device (no memory); None if it cannot be."""
    try:
        model = build_model(config, source, device="meta")
    except Exception:  # an init that needs real values (fixed filters), or a bad argument: judged by the
        return None  # real build, which names the field
    return {key: list(value.shape) for key, value in model.state_dict().items()}


def check_weights_fit(
    expected: dict[str, list[int]], found: dict[str, list[int]], source: str, name: str
) -> None:
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    if missing or extra or wrong:
        first = (
            f"{wrong[0]} is {found[wrong[0]]} but the model has {expected[wrong[0]]}"
            if wrong
            else f"missing {missing[:3]}"
            if missing
            else f"unexpected {extra[:3]}"
        )
        raise ConfigError(
            f"{source}: {WEIGHTS} does not fit {name} with its config.json ({first}); the weights may "
            "belong to another architecture or configuration: export the model again"
        )


def load_checked(config: dict[str, Any], weights: Path, source: str, map_location: str = "cpu") -> nn.Module:
    """The model `config` describes with the weights of `weights`, after checking that they fit."""
    check_config(config, source)
    check_folder_model_args(config, source)
    found = weight_shapes(weights, source)
    expected = expected_shapes(config, source)
    if expected is not None:
        check_weights_fit(expected, found, source, config["model"])
    model = build_model(config, source)
    check_weights_fit(
        {k: list(v.shape) for k, v in model.state_dict().items()}, found, source, config["model"]
    )
    try:
        load_model(model, str(weights), strict=True, device=map_location)
    except (SafetensorError, RuntimeError, OSError) as exc:
        raise ConfigError(f"{source}: {WEIGHTS} cannot be loaded ({' '.join(str(exc).split())})") from exc
    bad = next(
        (k for k, v in model.state_dict().items() if v.is_floating_point() and not v.isfinite().all()), None
    )
    if bad is not None:
        raise ConfigError(
            f"{source}: {WEIGHTS} holds NaN or infinite values (in {bad}); the weights are damaged"
        )
    model.pretrained_config = config
    return model.eval()


def refuse_missing_folder(folder: Path) -> None:
    """`models/photo` where the folder `models/` is here: a mistyped local folder, not a Hub repository
    (whose lookup, offline, retries for half a minute); one line now, with the folder's close names."""
    from convinit.naming.did_you_mean import close_names

    close = close_names(folder.name, [p.name for p in folder.parent.iterdir() if p.is_dir()], n=1)
    hint = f" (did you mean {folder.parent / close[0]}?)" if close else f" in {folder.parent}"
    raise ConfigError(
        f"{folder}: no such folder{hint}; pass a folder from `convinit export` (a name user/name is read "
        "from the Hub only when no folder user/ is here)"
    )


def is_repo_id(text: str) -> bool:
    return bool(REPO_ID.fullmatch(text)) and ".." not in text and "--" not in text


def from_pretrained(
    name_or_dir: str | Path,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
    token: str | bool | None = None,
    map_location: str = "cpu",
) -> nn.Module:
    """A saved model from a folder or a Hub repository `user/name` (its cache when `HF_HUB_OFFLINE=1`)."""
    source = str(name_or_dir)
    folder = Path(name_or_dir).expanduser()
    if folder.is_dir():
        if (folder / "config.yaml").is_file() and not (folder / CONFIG).is_file():
            raise ConfigError(
                f"{folder} is a training run, not a saved model: `convinit export {folder} DIR`"
            )
        read_pretrained_config(folder / CONFIG, source)  # a clear error before the mixin reads it
        source = str(folder)
    elif folder.exists() or not is_repo_id(source):
        raise ConfigError(
            f"{source} is not a model folder nor a Hub name user/name; pass a folder from `convinit export`"
        )
    elif folder.parent != Path(".") and folder.parent.is_dir():
        refuse_missing_folder(folder)
    hub = dict(revision=revision, cache_dir=cache_dir, local_files_only=local_files_only, token=token)
    try:
        if not folder.is_dir():  # the Hub: read and check config.json first, from the cache when offline
            from huggingface_hub import hf_hub_download

            read_pretrained_config(Path(hf_hub_download(source, CONFIG, **hub)), source)
        return PretrainedMixin.from_pretrained(source, map_location=map_location, **hub)
    except ConfigError:
        raise
    except HUB_ERRORS as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ConfigError(
            f"{source} is not a local folder and could not be read from the Hub ({type(exc).__name__}: "
            f"{detail}); check the name, or download it once while online (HF_HUB_OFFLINE=1 reads the cache)"
        ) from exc
