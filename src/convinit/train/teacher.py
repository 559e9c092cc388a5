"""DeiT's hard distillation: the frozen teacher whose argmax is a second target.

A teacher is checked before the student's run folder is touched (`check_teacher`): it is not the
student's own folder, it holds an intact checkpoint (or is an export), and it was trained on images of
the student's classes, channels and size. Only then is the folder prepared, and the teacher itself
opened where it always was (after the student's init), so the random streams of a distilled run stay
those of the runs kept under results/.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.pretrained import CONFIG, from_pretrained, read_pretrained_config
from convinit.runs.checkpoint import latest_checkpoint
from convinit.runs.preprocessing_record import read_data_record
from convinit.runs.run_dir import refuse_if_all_damaged
from convinit.train.opening import open_run, record_shape
from convinit.train.plan import DataShape


def refuse_own_teacher(teacher: str | None, run_dir: Path) -> None:
    """A run cannot learn from itself: its folder would be emptied (or overwritten) before it is read."""
    if teacher is None:
        return
    mine, theirs = Path(run_dir).resolve(), Path(teacher).resolve()
    if mine == theirs or mine.is_relative_to(theirs) or theirs.is_relative_to(mine):
        raise ConfigError(
            f"teacher {teacher} is this run's own folder {run_dir} (or lies inside it): a run cannot be its "
            "own teacher; pass a finished run or an export elsewhere, or another --out"
        )


def teacher_shape(teacher: str) -> DataShape | None:
    """The classes, channels and image size the teacher was trained on, read from its files without
    building it; ConfigError when it holds no intact checkpoint. None: a run too old to record them."""
    path = Path(teacher)
    if (path / "config.yaml").is_file():
        if latest_checkpoint(path) is None:
            refuse_if_all_damaged(path)  # damaged checkpoints: each named in one line
            raise ConfigError(f"teacher {path} holds no intact checkpoint yet; train it first")
        record = read_data_record(path)
        return None if record is None else record_shape(record)
    config = read_pretrained_config(path / CONFIG, f"teacher {path}")
    args = config["model_args"]
    return DataShape(args["num_classes"], args["in_chans"], config.get("img_size", args.get("img_size")))


def check_teacher(teacher: str | None, shape: DataShape | None) -> None:
    """Refuse, in one line and before the student's folder is touched, a teacher that cannot label the
    student's images: another class count, channel count or image size (`shape`: the student's data;
    None: not known yet, only the checkpoint is checked)."""
    if teacher is None:
        return
    known = teacher_shape(teacher)
    if known is None or shape is None:
        return
    pairs = {
        "classes": (known.num_classes, shape.num_classes),
        "channels": (known.in_chans, shape.in_chans),
        "image size": (sides(known.img_size), sides(shape.img_size)),
    }
    for what, (theirs, ours) in pairs.items():
        if theirs is not None and theirs != ours:
            raise ConfigError(
                f"teacher {teacher} was trained on {what} {format_value(theirs)} but this run's data has "
                f"{format_value(ours)}; pass a teacher trained on images like this run's"
            )


def sides(size: int | tuple[int, int] | list[int] | None) -> tuple[int, int] | None:
    """(h, w) of an image size given as n, (h, w) or [h, w]; None when not recorded."""
    if size is None:
        return None
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def format_value(value: object) -> str:
    """28 for (28, 28), 28x32 for (28, 32): sizes as a user writes them."""
    if isinstance(value, tuple):
        return str(value[0]) if value[0] == value[1] else "x".join(str(v) for v in value)
    return str(value)


def load_teacher(teacher: str | None, num_classes: int, device: torch.device) -> nn.Module | None:
    """The frozen teacher for hard distillation (the config's `teacher`): a training run, at its newest
    checkpoint (opened as every run is reopened), or a saved model (`convinit export`)."""
    if teacher is None:
        return None
    path = Path(teacher)
    if (path / "config.yaml").is_file():
        opened = open_run(path, data=False)  # not reseeding this run's generators
        model, classes = opened.model, len(opened.record["classes"])
    else:
        model = from_pretrained(path)
        classes = model.model_kwargs["num_classes"]
    if classes != num_classes:
        raise ConfigError(f"teacher {path} predicts {classes} classes but the training set has {num_classes}")
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval().to(device)
