"""predict reads a 16-bit image as training did: scaled to 8 bits by its range, not clipped to white."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from convinit import create_model
from convinit.share.predict import model_input


def test_a_16_bit_image_through_the_crop_path_is_scaled_not_white(tmp_path):
    gradient = np.linspace(0, 65535, 16 * 16).reshape(16, 16).astype(np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(gradient).save(path)
    assert Image.open(path).mode.startswith("I")  # PIL reads it as a 16-bit image
    model = create_model("simplevit", num_classes=2, img_size=16, in_chans=1, patch_size=4, dim=16, depth=1,
                         heads=2, dim_head=8, mlp_dim=16)  # fmt: skip
    model.pretrained_config = {
        "mean": [0.0], "std": [1.0],
        "preprocess": {"resize": "center_crop", "crop_size": 16, "interpolation": "bilinear", "crop_pct": 1},
    }  # fmt: skip
    pixels = model_input([path], model)[0, 0]
    assert float((pixels >= 0.999).float().mean()) < 0.05  # on main: about 99 % white
    assert float(pixels.min()) < 0.05 and torch.isfinite(pixels).all()
