"""A run folder's reuse: a run that stopped before its first step never blocks the next command on its
folder, and every refusal of a run folder names the way out."""

from __future__ import annotations

import numpy as np
from PIL import Image

from convinit.cli import main
from convinit.runs.checkpoint import list_checkpoints

TINY_FOLDER_RUN = ["epochs=1", "batch_size=4", "warmup_epochs=0", "device=cpu", "eval_every=0"]


def photo_folder(root):
    """Two classes of six random 8 x 8 RGB images: a folder dataset, whose shape is known only once read."""
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def test_a_mistyped_folder_run_does_not_block_its_corrected_rerun(tmp_path, capsys):
    photos, out = photo_folder(tmp_path / "photos"), tmp_path / "runs" / "t"
    command = ["train", "dataset=folder", f"data_dir={photos}", *TINY_FOLDER_RUN, "--out", str(out)]
    command.append("--no-progress")
    tiny = ["model_args.patch_size=4", "model_args.depth=1", "model_args.heads=2", "model_args.dim_head=8"]
    tiny.append("init=random")  # a 2x2 grid is too small for own_data's impulse kernel; not what is tested
    assert main([*command, *tiny, "model_args.dimm=32"]) == 2
    assert "takes no argument dimm" in capsys.readouterr().err

    assert main([*command, *tiny, "model_args.dim=16", "model_args.mlp_dim=16"]) == 0
    assert list_checkpoints(out) and (out / "finished.json").exists()
    assert "dimm" not in (out / "config.yaml").read_text()


def test_every_refusal_of_a_used_run_folder_names_resume_or_overwrite(tmp_path, tiny_overrides, capsys):
    out = tmp_path / "run"
    assert main(["train", *tiny_overrides, "epochs=1", "--out", str(out), "--no-progress"]) == 0
    assert main(["train", *tiny_overrides, "--out", str(out), "--no-progress"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    (out / "finished.json").unlink()  # now an unfinished run with a checkpoint: something to continue
    assert main(["train", *tiny_overrides, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--overwrite" in err
