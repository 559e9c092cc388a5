"""Tiny-ImageNet-200 in its real layout, fabricated small: 3 classes of 64x64 JPEGs."""

from pathlib import Path

import pytest
import torch
from PIL import Image

from convinit.data import load_dataset
from convinit.errors import DataError

WNIDS = ["n01443537", "n01629819", "n01641577"]
COLOURS = [(250, 10, 10), (10, 250, 10), (10, 10, 250)]  # one solid colour per class survives JPEG
WORDS = (
    "n00001740\tentity\n"
    "n01443537\tgoldfish, Carassius auratus\n"
    "n01629819\tEuropean fire salamander, Salamandra salamandra\n"
    "n01641577\tbullfrog, Rana catesbeiana\n"
    "n99999999\tnot a class of this dataset\n"
)


def write_tiny_imagenet(root: Path, train_per_class: int = 2, val_per_class: int = 2) -> Path:
    folder = root / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    (folder / "words.txt").write_text(WORDS)
    for wnid, colour in zip(WNIDS, COLOURS, strict=True):
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True)
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
        for i in range(train_per_class):
            Image.new("RGB", (64, 64), colour).save(images / f"{wnid}_{i}.JPEG", format="JPEG")
    lines = []
    for i in range(val_per_class * len(WNIDS)):
        k = (i * 2) % len(WNIDS)  # val images are not grouped by class in the real file
        Image.new("RGB", (64, 64), COLOURS[k]).save(folder / "val" / "images" / f"val_{i}.JPEG", "JPEG")
        lines.append(f"val_{i}.JPEG\t{WNIDS[k]}\t0\t0\t63\t63")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return folder


def colour_class(images: torch.Tensor) -> list[int]:
    """The class whose colour channel dominates each image."""
    return images.float().mean(dim=(2, 3)).argmax(dim=1).tolist()


def test_tiny_imagenet_reader_reads_shapes_labels_and_class_names(tmp_path):
    write_tiny_imagenet(tmp_path)
    ds = load_dataset("tiny-imagenet", tmp_path)
    assert ds.train_images.shape == (6, 3, 64, 64) and ds.test_images.shape == (6, 3, 64, 64)
    assert ds.train_images.dtype == torch.uint8 and ds.train_labels.dtype == torch.int64
    assert ds.classes == ["goldfish", "European fire salamander", "bullfrog"]
    assert ds.train_labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert colour_class(ds.train_images) == ds.train_labels.tolist()


def test_tiny_imagenet_val_labels_come_from_val_annotations(tmp_path):
    write_tiny_imagenet(tmp_path)
    ds = load_dataset("tiny-imagenet", tmp_path / "tiny-imagenet-200")
    assert ds.test_labels.tolist() == [0, 2, 1, 0, 2, 1]
    assert colour_class(ds.test_images) == ds.test_labels.tolist()
    # JPEG of a solid colour decodes to within a few levels of it
    assert (ds.test_images[0].float().mean(dim=(1, 2)) - torch.tensor(COLOURS[0]).float()).abs().max() < 4


def test_tiny_imagenet_grayscale_jpeg_is_decoded_to_three_channels(tmp_path):
    folder = write_tiny_imagenet(tmp_path)
    Image.new("L", (64, 64), 77).save(folder / "train" / WNIDS[1] / "images" / f"{WNIDS[1]}_0.JPEG", "JPEG")
    ds = load_dataset("tiny-imagenet", tmp_path)
    gray = ds.train_images[2].float()
    assert gray.shape == (3, 64, 64)
    assert (gray - 77).abs().max() < 2


def test_tiny_imagenet_class_without_train_images_is_one_line_data_error(tmp_path):
    folder = write_tiny_imagenet(tmp_path)
    for path in (folder / "train" / WNIDS[2] / "images").iterdir():
        path.unlink()
    with pytest.raises(DataError) as excinfo:
        load_dataset("tiny-imagenet", tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and WNIDS[2] in message and "re-extract" in message
