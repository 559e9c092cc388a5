"""`convinit datasets` says `available` only for what it has read: classes and split sizes from a sample of
the data; a missing folder, an empty one or one of fake images is never available, and the embedded set
is available whatever data_dir says."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from convinit.cli import main
from convinit.data.datasets import survey_dataset


def listing(capsys, *args) -> dict[str, str]:
    assert main(["datasets", *args]) == 0
    return {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}


def test_the_embedded_set_is_available_whatever_data_dir_names(tmp_path, capsys):
    lines = listing(capsys, f"data_dir={tmp_path / 'missing'}")
    assert "available  (embedded): 10 classes, 1000 train / 797 test images" in lines["digits"]
    assert f"not found  {tmp_path / 'missing'}: no such folder" in lines["folder"]


def test_an_empty_folder_is_available_as_nothing(tmp_path, capsys):
    lines = listing(capsys, f"data_dir={tmp_path}")
    assert [name for name, line in lines.items() if f" available  {tmp_path}" in line] == []
    assert "not written by save_to_disk" in lines["hf"]
    assert lines[f"{tmp_path}:"].startswith(
        f"{tmp_path}: no dataset reads it (as dataset=folder: lacks class"
    )


def test_a_users_folder_is_named_and_installed_sets_are_surveyed_at_their_own_places(
    tmp_path, capsys, monkeypatch
):
    """`datasets data_dir=photos` is a question about photos: the system's Fashion-MNIST is not 'not found
    in photos' but looked for where it lives; the first line says what photos reads as."""
    from convinit.data.datasets import dataset_info

    photos, system = tmp_path / "photos", tmp_path / "system-fashion"
    for name in ("cat", "dog"):
        (photos / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((6, 6, 3), 40 * i, dtype=np.uint8)).save(photos / name / f"{i}.png")
    monkeypatch.setattr(dataset_info("fashion-mnist"), "default_dir", lambda: system)
    lines = listing(capsys, f"data_dir={photos}")
    assert (
        lines[f"{photos}:"]
        == f"{photos}: reads as dataset=folder (train on it with dataset=folder data_dir={photos})"
    )
    assert f"not found  {system}: no such folder" in lines["fashion-mnist"]
    assert f"available  {photos}: 2 classes" in lines["folder"]


def test_a_folder_of_fake_pngs_is_unusable_naming_the_file(tmp_path):
    for name in ("cat", "dog"):
        for i in range(3):
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / f"{i}.png").write_text("not a png")
    status, _, found = survey_dataset("folder", tmp_path)
    assert status == "unusable" and ".png cannot be decoded" in found
    (tmp_path / "dog").rename(tmp_path / ".dog")  # one class, one fake image per split at most
    assert survey_dataset("folder", tmp_path)[0] == "unusable"


def test_a_folder_of_images_is_reported_with_its_classes_and_split_sizes(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for name in ("cat", "dog", "owl"):
        (tmp_path / name).mkdir()
        for i in range(5):
            pixels = rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / name / f"{i}.png")
    line = listing(capsys, f"data_dir={tmp_path}")["folder"]
    assert f"available  {tmp_path}: 3 classes, 12 train / 3 test images (15 decoded)" in line


def test_a_saved_hf_dataset_is_reported_with_its_classes_and_split_sizes(tmp_path, digits):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    rows = {"image": [Image.fromarray(x[0].numpy()) for x in digits.train_images[:20]], "label": [0, 1] * 10}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    status, _, found = survey_dataset("hf", tmp_path / "saved")
    assert (status, found) == ("available", "2 classes, 16 train / 4 test images (16 decoded)")
