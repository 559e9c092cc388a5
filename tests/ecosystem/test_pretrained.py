"""Shareable models: save_pretrained / from_pretrained round trip, export of a run, predict on image files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import convinit
from convinit.cli import main
from convinit.errors import ConfigError
from convinit.share.predict import predict

PRESETS = {
    "simplevit": dict(
        img_size=8, in_chans=1, patch_size=2, dim=32, depth=1, heads=2, dim_head=16, mlp_dim=32
    ),
    "convit_tiny": dict(
        img_size=8, in_chans=1, patch_size=2, embed_dim=32, num_heads=4, depth=2, local_up_to_layer=1
    ),
    "deit_tiny": dict(img_size=8, in_chans=1, patch_size=2, embed_dim=32, num_heads=4, depth=1),
    "convmixer": dict(
        img_size=8, in_chans=1, patch_size=1, dim=16, depth=1, kernel_size=3, spatial="impulse"
    ),
}


@pytest.mark.parametrize("name", PRESETS)
def test_save_then_load_gives_the_same_logits(name, tmp_path):
    torch.manual_seed(0)
    model = convinit.create_model(name, num_classes=4, **PRESETS[name]).eval()
    model.save_pretrained(tmp_path / "m", classes=["a", "b", "c", "d"], mean=[0.3], std=[0.2])
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model"] == name and config["classes"] == ["a", "b", "c", "d"]
    loaded = convinit.from_pretrained(tmp_path / "m")
    x = torch.randn(2, 1, 8, 8)
    assert torch.equal(model(x), loaded(x))


def test_from_pretrained_of_a_run_directory_says_to_export_it(tmp_path, tiny_overrides):
    assert main(["train", *tiny_overrides, "epochs=1", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    with pytest.raises(ConfigError, match="convinit export"):
        convinit.from_pretrained(tmp_path / "run")


def test_export_and_predict_classify_real_digit_images(tmp_path, tiny_overrides, digits, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_overrides, "epochs=4", "lr=3e-3", "--out", str(run), "--no-progress"]) == 0
    assert main(["export", str(run), str(tmp_path / "model")]) == 0
    paths = []
    for i in range(20):  # test images written as PNG files, as a user would have them
        path = tmp_path / f"digit{i}.png"
        Image.fromarray(digits.test_images[i, 0].numpy()).save(path)
        paths.append(path)
    ranked = predict(tmp_path / "model", paths, top=2)
    assert all(len(r) == 2 and r[0][1] >= r[1][1] for r in ranked)
    predicted = np.array([int(r[0][0]) for r in ranked])
    truth = digits.test_labels[:20].numpy()
    # the exported model must agree with the run's own evaluation of these images
    model = convinit.from_pretrained(tmp_path / "model")
    config = model.pretrained_config
    x = (digits.test_images[:20].float() / 255 - config["mean"][0]) / config["std"][0]
    assert (model(x).argmax(1).numpy() == predicted).all()
    assert (predicted == truth).mean() > 0.3  # far above chance (0.1) after 4 epochs
    assert main(["predict", str(tmp_path / "model"), str(paths[0])]) == 0
    assert str(paths[0]) in capsys.readouterr().out
