"""An exported model sees image files exactly as the run's own evaluation saw them.

A run records, when it starts, the classes, normalisation and resizing its data source trains and
evaluates with (`preprocessing.json`); export copies them into config.json and `predict` applies them.
Checked on a real class-per-folder set (the digits as PNG files, some at another size), streamed and
device-resident: the exported model's logits on the raw test files equal the run's evaluation of the
same files, and export reads no image to find them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from convinit.cli import main
from convinit.config import load_config, resolve_config
from convinit.data import source as data_source_module
from convinit.data.readers.folder import folder_splits
from convinit.data.source import build_data
from convinit.models.pretrained import from_pretrained
from convinit.runs.checkpoint import latest_checkpoint, load_weights
from convinit.share.predict import model_input, predict
from convinit.train import train
from convinit.train.opening import open_model, source_shape
from convinit.train.plan import data_recipe, resolve_plan

TINY = ["model_args.patch_size=4", "model_args.depth=1", "model_args.dim=32", "model_args.heads=2",
        "model_args.dim_head=16", "model_args.mlp_dim=64", "warmup_epochs=0", "device=cpu", "epochs=1",
        "batch_size=50", "lr=3e-3", "img_size=16", "crop_padding=0", "workers=0",
        "deterministic=true"]  # fmt: skip


@pytest.fixture(scope="module")
def digit_folder(tmp_path_factory, digits) -> Path:
    """DIR/train/<digit>/*.png and DIR/test/<digit>/*.png: 200 and 100 real digits, every third one saved
    at 12x12 (a folder of mixed sizes, as users bring)."""
    root = tmp_path_factory.mktemp("digit_folder")
    for split, count in (("train", 200), ("test", 100)):
        images, labels = getattr(digits, f"{split}_images"), getattr(digits, f"{split}_labels")
        for i in range(count):
            folder = root / split / str(int(labels[i]))
            folder.mkdir(parents=True, exist_ok=True)
            image = Image.fromarray(images[i, 0].numpy())
            (image.resize((12, 12), Image.NEAREST) if i % 3 == 0 else image).save(folder / f"{i}.png")
    return root


@torch.no_grad()
def run_evaluation_logits(run_dir: Path) -> torch.Tensor:
    """The logits the run's own evaluation path gives its test files (its data source, its newest
    checkpoint), in the order of `folder_splits`."""
    cfg = load_config(run_dir / "config.yaml")
    data = build_data(data_recipe(cfg), torch.device("cpu"))
    model = open_model(resolve_plan(cfg), source_shape(data))
    load_weights(model, latest_checkpoint(run_dir))
    model.eval()
    return torch.cat([model(data.eval_transform(images)) for images, _ in data.test])


@pytest.mark.parametrize("data_mode", ["stream", "device"])
def test_exported_model_gives_raw_files_the_logits_of_the_runs_own_evaluation(
    tmp_path, digit_folder, data_mode, monkeypatch
):
    cfg = resolve_config(
        None, [*TINY, "dataset=folder", f"data_dir={digit_folder}", f"data_mode={data_mode}"]
    )
    run_dir = train(cfg, run_dir=tmp_path / "run", progress=False).run_dir
    record = json.loads((run_dir / "preprocessing.json").read_text())
    files, expected = folder_splits(digit_folder).test_paths, run_evaluation_logits(run_dir)
    with monkeypatch.context() as patched:  # export must not read the data to learn its statistics
        patched.setattr(data_source_module, "build_data", lambda *a, **k: pytest.fail("export read the data"))
        assert main(["export", str(run_dir), str(tmp_path / "model")]) == 0
    model = from_pretrained(tmp_path / "model")
    config = model.pretrained_config
    assert config["mean"] == record["mean"] and config["std"] == record["std"]
    if data_mode == "stream":  # the statistics the streamed path trains with, not the folder's own
        assert record["preprocess"]["resize"] == "center_crop"
    with torch.no_grad():
        got = model(model_input(files, model))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    top1 = [best[0][0] for best in predict(tmp_path / "model", files, top=1)]
    assert top1 == [config["classes"][i] for i in expected.argmax(1).tolist()]


def test_predict_on_the_run_directory_uses_the_recorded_preprocessing(tmp_path, digit_folder):
    cfg = resolve_config(None, [*TINY, "dataset=folder", f"data_dir={digit_folder}", "data_mode=stream"])
    run_dir = train(cfg, run_dir=tmp_path / "run", progress=False).run_dir
    files, expected = folder_splits(digit_folder).test_paths, run_evaluation_logits(run_dir)
    probabilities = expected.softmax(1)
    got = predict(run_dir, files[:5], top=1)
    for (name, p), want in zip((best[0] for best in got), probabilities[:5], strict=True):
        assert int(name) == int(want.argmax()) and p == pytest.approx(float(want.max()), abs=1e-5)
