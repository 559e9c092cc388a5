"""Reliability round six: each cause found, with the test that fails on the code before its fix.

1. no command destroys what it then refuses (a run cannot be its own teacher; the teacher is checked
   before the folder is emptied);  2. no accepted value does nothing (`recommended=applied`);
3. no write through a link (a demo's `runs`);  4. a teacher of other images is one line;
5. `convert` checks every block before changing any;  6. readers check values, and `datasets` and `train`
agree;  7. every API refusal is one ConvinitError;  8. a folder is never ignored (`data_dir=` alone).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from convinit.cli import main
from convinit.config import resolve_config
from convinit.errors import ConfigError, ConvinitError
from convinit.train import train


def tiny_run(tmp_path: Path, tiny_overrides: list[str], name: str, *extra: str) -> Path:
    """A finished 1-epoch tiny run on digits: a teacher, or a folder that must survive a refusal."""
    run_dir = tmp_path / name
    train(resolve_config(None, [*tiny_overrides, "epochs=1", *extra]), run_dir=run_dir, progress=False)
    return run_dir


def folder_state(run_dir: Path) -> dict[str, bytes]:
    """Every file under `run_dir` and its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def overwrite_is_refused_untouched(student: Path, teacher: Path, overrides: list[str], said: str) -> None:
    """`train(teacher=..., --out student --overwrite)` refused with `said`, every file of `student` kept."""
    before = folder_state(student)
    cfg = resolve_config(None, [*overrides, f"teacher={teacher}"])
    with pytest.raises(ConfigError, match=said):
        train(cfg, run_dir=student, overwrite=True, progress=False)
    assert folder_state(student) == before


# 1. data loss: --overwrite into the run's own teacher emptied the folder, then refused it


def test_overwrite_into_its_own_teacher_is_refused_before_the_folder_is_touched(tmp_path, tiny_overrides):
    run_dir = tiny_run(tmp_path, tiny_overrides, "d")
    overwrite_is_refused_untouched(run_dir, run_dir, tiny_overrides, "cannot be its own teacher")


def test_a_teacher_without_a_checkpoint_is_refused_before_overwrite_empties_the_student(
    tmp_path, tiny_overrides
):
    student = tiny_run(tmp_path, tiny_overrides, "student")
    teacher = tiny_run(tmp_path, tiny_overrides, "teacher")
    for checkpoint in (teacher / "checkpoints").iterdir():
        for file in checkpoint.iterdir():
            file.unlink()
        checkpoint.rmdir()
    overwrite_is_refused_untouched(student, teacher, tiny_overrides, "holds no intact checkpoint")


# 4. a teacher of another image size or channel count failed at the first step with a traceback


def test_a_teacher_trained_on_another_image_size_is_refused_in_one_line(tmp_path, tiny_overrides):
    teacher = tiny_run(tmp_path, tiny_overrides, "teacher", "img_size=16")
    student = tiny_run(tmp_path, tiny_overrides, "student")
    said = "trained on image size 16 but this run's data has 8"
    overwrite_is_refused_untouched(student, teacher, tiny_overrides, said)


def test_an_exported_teacher_of_other_channels_is_refused_in_one_line(tmp_path, tiny_overrides):
    from convinit.train.plan import DataShape
    from convinit.train.step_parts import check_teacher

    export = tmp_path / "export"
    export.mkdir()
    config = {"model": "vit_tiny_patch2_32", "model_args": {"num_classes": 10, "in_chans": 3, "img_size": 8}}
    (export / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="trained on channels 3 but this run's data has 1"):
        check_teacher(str(export), DataShape(10, 1, 8))


# 5. `convert(model, "gpsa")` on a ViT whose blocks differ wrote ConViT's local init into block 0, then
# refused at block 1


def test_convert_checks_every_block_before_it_changes_any():
    from timm.layers import Attention
    from timm.models.vision_transformer import VisionTransformer

    from convinit import convert

    torch.manual_seed(0)
    model = VisionTransformer(img_size=16, patch_size=4, embed_dim=64, depth=2, num_heads=4, num_classes=3)
    model.blocks[1].attn = Attention(64, num_heads=2, qkv_bias=True)  # 2 heads: no square for local init
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises(ConfigError, match="square number of heads"):
        convert(model, "gpsa", layers=2)
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert [type(block.attn) for block in model.blocks] == [Attention, Attention]
    assert getattr(model, "conversion", None) is None


# 6. the digits reader checked the file's shape, not its values; `datasets` and `train` disagreed


@pytest.fixture
def digits_file_as(monkeypatch, tmp_path):
    """Point the digits reader at a copy of scikit-learn's file that `change` edits (or truncates)."""
    from convinit.data.readers import digits

    def use(change) -> Path:
        with gzip.open(digits.digits_file(), "rt") as f:
            table = np.loadtxt(f, delimiter=",", ndmin=2)
        path = tmp_path / "digits.csv.gz"
        data = change(table)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            with gzip.open(path, "wt") as f:
                np.savetxt(f, data, delimiter=",", fmt="%g")
        monkeypatch.setattr(digits, "digits_file", lambda: path)
        digits.digits_split.cache_clear()
        return path

    yield use
    digits.digits_split.cache_clear()


def edit(row: int, column: int, value: float):
    def change(table: np.ndarray) -> np.ndarray:
        table = table.copy()
        table[row, column] = value
        return table

    return change


def truncated(table: np.ndarray) -> bytes:
    buffer = gzip.compress("\n".join(",".join(f"{v:g}" for v in row) for row in table).encode())
    return buffer[: len(buffer) // 2]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (edit(5, 3, 1000), "pixel of 1000"),
        (edit(5, 3, float("nan")), "pixel of nan"),
        (edit(7, 64, 2.5), "label of 2.5"),
        (edit(7, 64, 11), "label of 11"),
        (truncated, "cannot be read"),
    ],
    ids=["pixel-1000", "pixel-nan", "label-2.5", "label-11", "truncated"],
)
def test_digits_values_are_checked_and_datasets_agrees_with_train(
    digits_file_as, change, said, tmp_path, tiny_overrides, capsys
):
    digits_file_as(change)
    assert main(["train", *tiny_overrides, "--out", str(tmp_path / "run")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "run" / "config.yaml").exists()  # refused before the run was written
    assert main(["datasets"]) == 0
    listing = [line for line in capsys.readouterr().out.splitlines() if line.startswith("digits")]
    assert "unusable" in listing[0] and said in listing[0]


# 7. `convinit.recommend(model)` on a model that cannot be deep-copied raised a raw TypeError


def test_recommend_on_a_model_that_cannot_be_copied_is_one_convinit_error():
    import threading

    from timm.models.vision_transformer import VisionTransformer

    import convinit

    model = VisionTransformer(img_size=16, patch_size=4, embed_dim=64, depth=1, num_heads=4, num_classes=3)
    model.lock = threading.Lock()  # a module holding a lock cannot be deep-copied
    with pytest.raises(ConvinitError, match="cannot be copied"):
        convinit.recommend(model)


# 2. `recommended=applied` typed by a user was accepted and turned a preset's impulse init into random


@pytest.mark.parametrize("preset", [None, "paper1/table3_alpha_small"])
def test_recommended_applied_is_refused_from_a_user_and_kept_from_a_saved_run(
    preset, tmp_path, tiny_overrides
):
    with pytest.raises(ConfigError, match="recommended=applied is what a saved run records"):
        resolve_config(preset, ["recommended=applied"])
    saved = tmp_path / "config.yaml"  # a run that got the recipe records it: its config still loads
    saved.write_text(
        "model: 'timm:vit_tiny_patch16_224'\nrecommended: applied\nconvert: blend\ninit: impulse\n"
    )
    assert resolve_config(str(saved), []).recommended == "applied"


def test_recommended_none_on_own_images_trains_the_plain_vit_and_says_so(capsys):
    from convinit.config import say_notes

    chosen = resolve_config(None, ["dataset=folder", "data_dir=photos", "recommended=none"])
    say_notes()
    assert (chosen.init, chosen.model_args.get("qk_input")) == (resolve_config(None, []).init, None)
    assert "own_data's model_args.qk_input=blend" in capsys.readouterr().err


# 3. `convinit demo --quick --out D` wrote its runs through a link D/runs


def test_demo_refuses_a_runs_link_in_its_folder_before_training(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "demo"
    out.mkdir()
    (out / "runs").symlink_to(elsewhere)
    assert main(["demo", "--quick", "--out", str(out)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_a_folder_convinit_makes_inside_an_output_folder_is_never_a_link(tmp_path):
    from convinit.system.atomic import make_folder

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "grid"
    out.mkdir()
    (out / "row").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="symbolic link"):
        make_folder(out / "row" / "seed0", inside=out)
    assert list(elsewhere.iterdir()) == []
    assert make_folder(out / "other" / "seed0", inside=out).is_dir()


# 8. `data_dir=photos` with no `dataset=` trained the embedded digits and said nothing of the folder


def class_folders(root: Path, classes: int = 2, count: int = 6) -> Path:
    """root/<class>/*.png: a user's folder of real 8x8 PNGs."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(classes):
        (root / f"c{index}").mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(
                root / f"c{index}" / f"{i}.png"
            )
    return root


def test_data_dir_without_a_dataset_trains_that_folder_and_says_so(tmp_path, tiny_overrides, capsys):
    photos = class_folders(tmp_path / "photos")
    assert (
        main(["train", *tiny_overrides, "epochs=1", f"data_dir={photos}", "--out", str(tmp_path / "r")]) == 0
    )
    assert "trained as dataset=folder" in capsys.readouterr().err
    assert "dataset: folder" in (tmp_path / "r" / "config.yaml").read_text()


def test_data_dir_of_no_image_folder_and_data_dir_for_an_embedded_set_are_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["train", f"data_dir={empty}", "--out", str(tmp_path / "a")]) == 2
    assert "dataset 'folder'" in capsys.readouterr().err
    assert main(["train", "dataset=digits", f"data_dir={empty}", "--out", str(tmp_path / "b")]) == 2
    assert "digits is embedded and reads no data_dir" in capsys.readouterr().err


# Honest ends (a newcomer's first hour): a one-class folder trained to 100 %; an underfitted run said nothing


def test_a_folder_of_one_class_is_refused_in_one_line(tmp_path, capsys):
    photos = class_folders(tmp_path / "photos", classes=1)
    assert main(["train", "dataset=folder", f"data_dir={photos}", "--out", str(tmp_path / "r")]) == 2
    assert "a classifier needs at least two" in capsys.readouterr().err


def test_a_run_that_ends_still_learning_says_so_with_the_epochs_that_would_help():
    from convinit.train.trainer import still_learning

    falling = [{"epoch": e, "train_loss": 2.0 - 0.05 * e} for e in range(1, 31)]
    falling[-1]["fit_acc"] = 71.0
    said = still_learning(falling, 30)
    assert "still learning" in said and "epochs=60" in said and "fits 71.0 %" in said
    flat = [{"epoch": e, "train_loss": 0.1} for e in range(1, 31)]
    assert still_learning(flat, 30) is None
