"""`convinit train --dry-run` prints the config a run decides on before it starts (what config.yaml will
hold, recipe and adaptations included) with its notes, and writes nothing: a test holds it equal to the
config.yaml of the real run, for convinit's own model, a timm model with and without the recommended
recipe, and a folder of images read only once the run starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from convinit.cli import main

TIMM = [
    "model=timm:vit_tiny_patch16_224",
    "model_args.patch_size=2",
    "model_args.embed_dim=32",
    "model_args.depth=1",
    "model_args.num_heads=2",
]


def rgb_folder(root: Path, classes: int = 2, count: int = 8, side: int = 16) -> Path:
    """root/<class>/*.png: real 16x16 colour PNGs, a user's folder."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(classes):
        (root / f"c{index}").mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{index}" / f"{i}.png")
    return root


@pytest.fixture
def photos(tmp_path) -> Path:
    return rgb_folder(tmp_path / "photos")


CASES = {
    "convinit-model": ["epochs=1", "batch_size=100", "model_args.depth=1", "per_class=20"],
    "timm-with-recipe": ["epochs=1", "per_class=20", *TIMM],
    "timm-as-it-is": ["epochs=1", "per_class=20", "recommended=none", *TIMM],
    "folder": ["epochs=1", "dataset=folder", "model_args.depth=1"],
    "timm-on-a-folder": ["epochs=1", "dataset=folder", *TIMM],
}


@pytest.mark.parametrize("case", CASES)
def test_dry_run_prints_the_config_the_real_run_saves_and_writes_nothing(case, photos, tmp_path, capsys):
    args = CASES[case] + ([f"data_dir={photos}"] if "dataset=folder" in CASES[case] else [])
    out = tmp_path / "run"
    assert main(["train", *args, "--out", str(out), "--dry-run"]) == 0
    decided = yaml.safe_load(capsys.readouterr().out)
    assert not out.exists()
    assert main(["train", *args, "--out", str(out), "--no-progress"]) == 0
    assert decided == yaml.safe_load((out / "config.yaml").read_text())


def test_dry_run_says_the_notes_the_run_would_say(photos, capsys):
    assert main(["train", "epochs=1", f"data_dir={photos}", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert f"data_dir={photos} with no dataset=: trained as dataset=folder" in captured.err
    assert yaml.safe_load(captured.out)["dataset"] == "folder"


def test_dry_run_of_a_resume_is_refused(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path), "--dry-run"]) == 2
    assert "--dry-run shows what a new run would train" in capsys.readouterr().err
