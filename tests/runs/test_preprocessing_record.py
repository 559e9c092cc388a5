"""`preprocessing.json` is read back by export, `predict RUN_DIR` and teachers: every field is checked by
type and range, and a hand-edited value is refused in one line naming the file and the field before any
model computes on it."""

from __future__ import annotations

import json
import os

import pytest

from convinit.cli import main
from convinit.errors import ConfigError
from convinit.runs.preprocessing_record import RECORD, read_data_record


def good_record() -> dict:
    return {
        "mode": "device",
        "classes": [str(i) for i in range(10)],
        "in_chans": 3,
        "img_size": [8, 8],
        "mean": [0.5, 0.4, 0.3],
        "std": [0.2, 0.2, 0.2],
        "preprocess": {"resize": "stretch", "decode_size": [8, 8]},
        "train_images": 1000,
        "test_images": 797,
    }


def deep(levels: int) -> list:
    value: list = [0.5]
    for _ in range(levels):
        value = [value]
    return value


CROP = {"resize": "center_crop", "crop_size": 8, "crop_pct": 0.875, "interpolation": "bicubic"}
DAMAGE = {  # what was edited -> the field the refusal must name
    "nan std": ({"std": [float("nan"), 0.2, 0.2]}, "'std'"),
    "inf std": ({"std": [float("inf"), 0.2, 0.2]}, "'std'"),
    "zero std": ({"std": [0.0, 0.2, 0.2]}, "'std'"),
    "negative std": ({"std": [-1, 0.2, 0.2]}, "'std'"),
    "inf mean": ({"mean": [float("inf"), 0.4, 0.3]}, "'mean'"),
    "string mean": ({"mean": "abc"}, "'mean'"),
    "string in mean": ({"mean": ["0.5", 0.4, 0.3]}, "'mean'"),
    "boolean in std": ({"std": [True, 0.2, 0.2]}, "'std'"),
    "too few std": ({"std": [0.2]}, "'std'"),
    "giant mean": ({"mean": [0.5] * 2_000_000}, "'mean'"),
    "100-deep mean": ({"mean": deep(100)}, "nested"),
    "integer classes": ({"classes": 5}, "'classes'"),
    "integer class names": ({"classes": list(range(10))}, "'classes'"),
    "string in_chans": ({"in_chans": "3"}, "'in_chans'"),
    "huge img_size": ({"img_size": [10**9, 8]}, "'img_size'"),
    "absurd decode_size": (
        {"preprocess": {"resize": "stretch", "decode_size": [100000, 100000]}},
        "decode_size",
    ),
    "scalar decode_size": ({"preprocess": {"resize": "stretch", "decode_size": 8}}, "decode_size"),
    "absurd crop_size": ({"preprocess": {**CROP, "crop_size": 10**9}}, "crop_size"),
    "zero crop_pct": ({"preprocess": {**CROP, "crop_pct": 0}}, "crop_pct"),
    "negative crop_pct": ({"preprocess": {**CROP, "crop_pct": -0.5}}, "crop_pct"),
    "crop_pct over 1": ({"preprocess": {**CROP, "crop_pct": 1.5}}, "crop_pct"),
    "unknown interpolation": ({"preprocess": {**CROP, "interpolation": "bogus"}}, "interpolation"),
    "unknown resize": ({"preprocess": {"resize": "squash"}}, "'preprocess'"),
    "null preprocess": ({"preprocess": None}, "preprocess"),
    "string image count": ({"test_images": "797"}, "'test_images'"),
    "missing std": ({"std": None}, "'std'"),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_field_is_refused_in_one_line_naming_the_file_and_the_field(tmp_path, name):
    edit, field = DAMAGE[name]
    record = {k: v for k, v in {**good_record(), **edit}.items() if v is not None or k == "preprocess"}
    (tmp_path / RECORD).write_text(json.dumps(record))
    with pytest.raises(ConfigError) as caught:
        read_data_record(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    assert str(tmp_path / RECORD) in message and field in message


def test_a_whole_record_and_one_of_the_streamed_path_are_accepted(tmp_path):
    for record in (good_record(), {**good_record(), "preprocess": CROP}):
        (tmp_path / RECORD).write_text(json.dumps(record))
        assert read_data_record(tmp_path) == record


def test_a_record_linked_to_an_endless_device_is_refused_unread(tmp_path):
    os.symlink("/dev/zero", tmp_path / RECORD)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_data_record(tmp_path)


@pytest.fixture
def trained_run(tmp_path, tiny_overrides):
    run_dir = tmp_path / "run"
    assert main(["train", *tiny_overrides, "epochs=1", "--out", str(run_dir), "--no-progress"]) == 0
    return run_dir


def test_export_predict_and_a_teacher_refuse_a_negative_std(trained_run, tiny_overrides, tmp_path, capsys):
    path = trained_run / RECORD
    path.write_text(json.dumps({**json.loads(path.read_text()), "std": [-1.0]}))
    image = tmp_path / "digit.png"
    from PIL import Image

    Image.new("L", (8, 8)).save(image)
    capsys.readouterr()
    commands = [
        ["export", str(trained_run), str(tmp_path / "out")],
        ["predict", str(trained_run), str(image)],
        ["train", *tiny_overrides, f"teacher={trained_run}", "--out", str(tmp_path / "s"), "--no-progress"],
    ]
    for command in commands:
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{path} is damaged: field 'std'" in err, command[0]
    assert not (tmp_path / "out").exists()
