"""Data a run cannot use ends in one line that names what is wrong, before any training.

A decompression bomb among a folder's images (every data path, including the header sampling that
chooses one), a corrupt image met by a streaming worker, an HF split saved empty, test images of a
class that train/ lacks; and a streamed run's workers are bound to die with their trainer.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

from convinit.cli import main
from convinit.data.streamed_loader import StreamLoader

TINY = ["epochs=1", "warmup_epochs=0", "device=cpu", "batch_size=8", "model_args.depth=1",
        "model_args.dim=32", "img_size=8", "crop_padding=0", "workers=2"]  # fmt: skip
PR_GET_PDEATHSIG = 2  # linux/prctl.h


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convinit: error: "), err
    return err[0]


def class_folder(root: Path, classes: dict[str, list[str]], count: int = 6) -> Path:
    """root/train/<class>/ and root/test/<class>/ with `count` real 8x8 PNGs each."""
    rng = np.random.default_rng(0)
    for split, names in classes.items():
        for name in names:
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


@pytest.mark.parametrize("data_mode", ["auto", "stream", "device"])
def test_a_decompression_bomb_in_a_class_folder_is_refused_in_one_line_naming_it(tmp_path, capsys, data_mode):
    root = class_folder(tmp_path / "data", {"train": ["a", "b"], "test": ["a", "b"]})
    bomb = root / "train" / "a" / "giant.png"
    side = int((2 * Image.MAX_IMAGE_PIXELS) ** 0.5) + 100  # past the limit at which PIL refuses the header
    Image.new("1", (side, side)).save(bomb)
    # init=random: own_data's note (said once per process, so only when this test runs first) stays out
    args = [*TINY, "dataset=folder", f"data_dir={root}", f"data_mode={data_mode}", "init=random"]
    assert main(["train", *args, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert f"image {bomb} is larger than PIL's limit" in line


def test_a_corrupt_image_met_by_a_streaming_worker_is_named_with_the_right_advice(tmp_path, capsys):
    root = class_folder(tmp_path / "data", {"train": ["a", "b"], "test": ["a", "b"]})
    broken = root / "train" / "b" / "3.png"
    broken.write_bytes(broken.read_bytes()[:60])  # the header survives, the pixels do not
    args = [*TINY, "dataset=folder", f"data_dir={root}", "data_mode=stream"]
    assert main(["train", *args, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert f"image {broken} cannot be decoded" in line and "remove it from the dataset" in line
    assert "free space" not in line


def test_an_hf_split_saved_empty_is_named_before_the_run_starts(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    images = [Image.fromarray(np.full((8, 8), 40 * i, np.uint8)) for i in range(4)]
    full = datasets.Dataset.from_dict({"image": images, "label": [0, 1, 0, 1]}, features=features)
    empty = datasets.Dataset.from_dict({"image": [], "label": []}, features=features)
    datasets.DatasetDict(train=full, test=empty).save_to_disk(str(tmp_path / "hf"))
    capsys.readouterr()  # the progress of save_to_disk
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "dataset=hf", f"data_dir={tmp_path / 'hf'}", "--out", str(run_dir)]) == 2
    assert "split 'test' of" in one_error_line(capsys) and not run_dir.exists()


def test_test_images_of_a_class_missing_from_train_are_refused_not_dropped(tmp_path, capsys):
    root = class_folder(tmp_path / "data", {"train": ["a", "b"], "test": ["a", "b", "c"]})
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "dataset=folder", f"data_dir={root}", "--out", str(run_dir)]) == 2
    line = one_error_line(capsys)
    assert f"{root / 'test'} holds classes that {root / 'train'} lacks: c (6 images)" in line
    assert not run_dir.exists()


class DeathSignals(Dataset):
    """Each item: the signal the kernel sends this worker when its parent dies (0: none)."""

    labels = torch.zeros(4, dtype=torch.long)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, key):
        signum = ctypes.c_int(0)
        ctypes.CDLL(None, use_errno=True).prctl(PR_GET_PDEATHSIG, ctypes.byref(signum))
        return torch.tensor(signum.value), torch.tensor(0)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="prctl is Linux's")
def test_streaming_workers_are_bound_to_die_with_their_trainer():
    loader = StreamLoader(DeathSignals(), batch_size=2, num_workers=2)
    signals = torch.cat([batch for batch, _ in loader]).tolist()
    assert signals == [9, 9, 9, 9]  # SIGKILL the moment the trainer dies, however it dies
