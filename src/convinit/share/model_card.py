"""The model card of an exported run: what a stranger needs to trust the weights and to retrain them.

Everything comes from the run directory (config.yaml, metrics.jsonl, init_report.json, the checkpoint's
epoch) and from `convinit.runs.provenance`; the command it prints resolves to the run's exact config (checked
here), and the config itself is embedded for runs whose settings no override list can express.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from convinit.config import KEYS, TrainConfig, resolve_config
from convinit.models.pretrained import USAGE
from convinit.runs.metrics import MetricsLog
from convinit.runs.provenance import provenance
from convinit.system.read_back import read_capped

RECIPE_KEYS = (
    "epochs", "batch_size", "optimizer", "lr", "weight_decay", "schedule", "warmup_epochs", "min_lr",
    "label_smoothing", "clip_grad", "ema_decay", "crop_padding", "hflip", "randaugment_n", "randaugment_m",
    "random_erasing", "mixup", "cutmix", "teacher",
)  # fmt: skip


def cli_value(value: Any) -> str:
    """A config value as `key=value` text that convinit's override parser reads back unchanged."""
    return value if isinstance(value, str) else json.dumps(value)  # JSON values are YAML flow values


def reproduce_overrides(cfg: TrainConfig) -> list[str] | None:
    """`key=value` items that make `convinit train` resolve to `cfg`, or None if none can."""
    base, run = resolve_config().to_dict(), cfg.to_dict()
    items = []
    for key in KEYS:
        if base[key] == run[key]:
            continue
        if isinstance(base[key], dict) and isinstance(run[key], dict):
            if set(base[key]) - set(run[key]):  # an override can add or change entries, never remove one
                return None
            items += [f"{key}.{k}={cli_value(v)}" for k, v in run[key].items() if base[key].get(k) != v]
        else:
            items.append(f"{key}={cli_value(run[key])}")
    try:
        return items if resolve_config(None, items) == cfg else None
    except ValueError:
        return None


def result_at(run_dir: Path, epoch: int) -> dict[str, Any]:
    """The metrics row of `epoch` (the checkpoint exported), or {} if it was not logged."""
    return next((row for row in MetricsLog(run_dir).rows() if row.get("epoch") == epoch), {})


def init_figures(run_dir: Path) -> str:
    """The init's figures on real images, in one short line: attention mass on each head's target offset
    and argmax agreement (impulse), else the maps' row entropy and distance, on the images held apart from
    the fit where the report has them (the figure the docs quote); a figure measured on the position-only
    pseudo-input is named a proxy (docs/method.md §7: it says nothing of what the layers do with images)."""
    try:
        report = json.loads(read_capped(run_dir / "init_report.json"))
    except (OSError, ValueError, RecursionError):  # ConfigError (no regular file, too large) is one
        return "not recorded"
    if not isinstance(report, dict):
        return "not recorded"
    held_out = isinstance(report.get("real_pass_held_out"), dict)
    real = report.get("real_pass_held_out") if held_out else report.get("real_pass")
    parts = []
    if isinstance(real, dict):
        named = (("mean_mass", "target mass"), ("mean_argmax_agreement", "argmax agreement"))
        if not any(is_figure(real.get(key)) for key, _ in named):
            named = (("mean_entropy", "row entropy"), ("mean_distance", "distance (patches)"))
        figures = ", ".join(f"{name} {real[key]:.2f}" for key, name in named if is_figure(real.get(key)))
        count = real.get("images")
        images = f"{count} real images" if isinstance(count, int) else "real images"
        apart = " held apart from the fit" if held_out and report.get("scheme") == "impulse" else ""
        parts.append(f"{figures} on {images}{apart}" if figures else "")
    proxy = report.get("pseudo_input")
    if isinstance(proxy, str) and is_figure(report.get("mean_mass")):
        parts.append(f"proxy: mass {report['mean_mass']:.2f} on the pseudo-input {proxy} alone")
    return "; ".join(part for part in parts if part) or "-"


def is_figure(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_commit(run_dir: Path) -> str:
    """The commit the run was trained at (grid runs record it), else the one exporting it."""
    try:  # a link to /dev/zero or a FIFO is refused unread (ConfigError), like every record read back
        commit = json.loads(read_capped(run_dir / "experiment.json"))["git_commit"]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        commit = None
    return commit if isinstance(commit, str) else provenance()["git_commit"] + " (at export)"


def recipe(cfg: TrainConfig) -> str:
    """The optimisation and augmentation settings that are switched on."""
    unused = set() if cfg.randaugment_n else {"randaugment_m"}
    return ", ".join(
        f"{k}={getattr(cfg, k)}"
        for k in RECIPE_KEYS
        if getattr(cfg, k) not in (None, 0, False) and k not in unused
    )


def dataset_label(cfg: TrainConfig) -> str:
    """`hf:user/name` or `hf:FOLDER` for a datasets set, the registered name otherwise."""
    if cfg.dataset != "hf":
        return cfg.dataset
    return f"hf:{cfg.hf_name or Path(cfg.data_dir or '').name}"


def subset_note(cfg: TrainConfig) -> str:
    """How the training images were chosen, when not the whole training split."""
    if cfg.per_class is not None:
        return f" ({cfg.per_class} per class)"
    return f" (train_fraction={cfg.train_fraction})" if cfg.train_fraction is not None else ""


def card_fields(run_dir: Path, cfg: TrainConfig, record: dict[str, Any], epoch: int) -> dict[str, str]:
    """The card's table, one row per fact about the run."""
    row = result_at(run_dir, epoch)
    accuracy = f"{row['test_acc']:.2f}%" if row.get("test_acc") is not None else "not evaluated at this epoch"
    source = cfg.dataset + "".join(
        f" {k}={getattr(cfg, k)}" for k in ("data_dir", "hf_name", "hf_config") if getattr(cfg, k)
    )
    about = provenance()
    return {
        "model": cfg.model,
        "model_args": json.dumps(cfg.model_args, sort_keys=True),
        **({"conversion": conversion_row(cfg)} if cfg.convert else {}),
        "dataset": source,
        "training images": str(record.get("train_images", "not recorded")) + subset_note(cfg),
        "test images": str(record.get("test_images", "not recorded")),
        "classes": str(len(record["classes"])),
        "input": input_description(record),
        "recipe": recipe(cfg),
        "init": f"{cfg.init} {json.dumps(cfg.init_args, sort_keys=True) if cfg.init_args else ''}".strip(),
        "init report": init_figures(run_dir),
        "test accuracy": accuracy,
        "epoch": f"{epoch} of {cfg.epochs}",
        "seed": str(cfg.seed),
        "convinit": about["convinit_version"],
        "commit": run_commit(run_dir),
        "torch": about["torch_version"],
    }


def four_digits(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def input_description(record: dict[str, Any]) -> str:
    """The preprocessing the model was trained with, as the run recorded it (`preprocessing.json`)."""
    size = (
        "x".join(str(s) for s in record["img_size"])
        if isinstance(record["img_size"], list)
        else (f"{record['img_size']}x{record['img_size']}")
    )
    how = record["preprocess"]
    resize = (
        f"short side to {how['crop_size']}/{how['crop_pct']}, centre crop ({how['interpolation']})"
        if how.get("resize") == "center_crop"
        else "resized (bilinear)"
    )
    mean, std = four_digits(record["mean"]), four_digits(record["std"])
    return f"{size}, {resize}, normalised with mean {mean} std {std}"


def conversion_row(cfg: TrainConfig) -> str:
    """What `convert=` put into the model, and that loading it takes convinit (docs/method.md §9)."""
    what = {
        "gpsa": "ConViT's gated positional self-attention in the first blocks",
        "blend": "paper 1's Q/K blend in the first blocks",
        "gpsa+blend": "ConViT's GPSA in the first blocks, paper 1's Q/K blend in the rest",
    }[cfg.convert]
    args = f" {json.dumps(cfg.convert_args, sort_keys=True)}" if cfg.convert_args else ""
    return (
        f"{cfg.convert}{args}: {what} (convinit.convert); "
        "load with convinit.from_pretrained, which converts the rebuilt model before loading the weights"
    )


def timm_usage(cfg: TrainConfig, record: dict[str, Any]) -> str:
    """For a timm model, how timm itself loads the weights (its own state dict; the head of a pretrained
    config is 1000 classes, so the overlay names the run's). Not for a converted model: its converted
    layers are convinit's, which timm alone cannot build."""
    if not str(cfg.model).startswith("timm:") or cfg.convert:
        return ""
    name, classes = cfg.model.split(":", 1)[1], len(record["classes"])
    args = ", ".join(f"{k}={v!r}" for k, v in cfg.model_args.items())
    shape = f"num_classes={classes}, in_chans={record['in_chans']}, img_size={record['img_size']!r}"
    return (
        "With timm, from this folder:\n\n```python\nimport timm\n\nmodel = timm.create_model(\n"
        f'    "{name}", pretrained=True,\n'
        f'    pretrained_cfg_overlay=dict(file="model.safetensors", num_classes={classes}),\n'
        f"    {shape}{', ' + args if args else ''},\n)\n```\n\n"
    )


def run_model_card(run_dir: Path, cfg: TrainConfig, record: dict[str, Any], epoch: int) -> str:
    """The README.md written beside the exported weights; `record` is the run's `preprocessing.json`."""
    fields = card_fields(run_dir, cfg, record, epoch)
    overrides = reproduce_overrides(cfg)
    command = (
        "convinit train " + " ".join(shlex.quote(item) for item in overrides) + " --out run"
        if overrides is not None
        else "convinit train --config run_config.yaml --out run   # run_config.yaml: the block below"
    )
    front = {
        "library_name": "convinit",
        "pipeline_tag": "image-classification",
        "tags": ["convinit", "vision"],
    }
    if cfg.hf_name:
        front["datasets"] = [cfg.hf_name]
    table = "\n".join(f"| {k} | {v} |" for k, v in fields.items())
    return (
        f"---\n{yaml.safe_dump(front, sort_keys=False)}---\n\n"
        f"# {cfg.model} trained on {dataset_label(cfg)}\n\n"
        f"Trained with convinit: test accuracy {fields['test accuracy']} "
        f"after epoch {epoch} (seed {cfg.seed}).\n\n"
        f"| field | value |\n| --- | --- |\n{table}\n\n"
        f"## Use\n\n{USAGE}\n{timm_usage(cfg, record)}"
        f"## Reproduce\n\n```bash\n{command}\n```\n\n"
        f"The run's resolved config:\n\n```yaml\n{yaml.safe_dump(cfg.to_dict(), sort_keys=False)}```\n"
    )
