"""16-bit, 32-bit and float image files are scaled to 8 bits by their real range, on both data paths.

PIL's own conversion to 'L' or 'RGB' clips such values at 255: a 16-bit PNG or a float TIFF turned
white (99.6 % of the pixels of a 16-bit gradient at 255), silently, on the device-resident readers
(`decode_images`) and in the streaming workers (`StreamingImages`, `sampled_statistics`) alike. And one
rule for every open of a user's image: more pixels than PIL's limit is refused from the header.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from convinit.data.image_files import decode_images, decode_sample
from convinit.data.source import sampled_shape
from convinit.data.streamed_loader import StreamingImages, sampled_statistics
from convinit.errors import DataError
from convinit.share.predict import check_image

RAMP = np.arange(32 * 32, dtype=np.float64).reshape(32, 32) / (32 * 32 - 1)  # 0..1, left to right, top down


def write(path: Path, values: np.ndarray, mode: str | None = None) -> Path:
    Image.fromarray(values, mode).save(path)
    return path


FILES = {
    "16-bit PNG, full range": (lambda d: write(d / "a.png", (RAMP * 65535).astype(np.uint16)), RAMP * 255),
    "16-bit PNG, 12-bit content": (lambda d: write(d / "b.png", (RAMP * 4095).astype(np.uint16)), RAMP * 255),
    "32-bit TIFF": (lambda d: write(d / "c.tif", (RAMP * 4e6 - 1e6).astype(np.int32), "I"), RAMP * 255),
    "float TIFF in 0..1": (lambda d: write(d / "d.tif", RAMP.astype(np.float32), "F"), RAMP * 255),
    "float TIFF in -3..7": (
        lambda d: write(d / "e.tif", (RAMP * 10 - 3).astype(np.float32), "F"),
        RAMP * 255,
    ),
    "16-bit PNG of 8-bit values": (
        lambda d: write(d / "f.png", (RAMP * 200).astype(np.uint16)),
        np.floor(RAMP * 200),
    ),
}


def streamed(path: Path, channels: int = 1) -> np.ndarray:
    image = StreamingImages([path], [0], transform=lambda img: img, in_chans=channels).image(0)
    return np.asarray(image, dtype=np.float64)


@pytest.mark.parametrize("case", FILES)
def test_high_bit_depth_and_float_images_keep_their_range_on_both_paths(tmp_path, case):
    make, expected = FILES[case]
    path = make(tmp_path)
    decoded = decode_images([path], grayscale=True)[0, 0].numpy().astype(np.float64)
    assert np.abs(decoded - expected).max() <= 1.0
    assert (decoded == 255).mean() < 0.01  # PIL's clipping made nearly all of it white
    assert np.array_equal(streamed(path), decoded)
    rgb = decode_images([path])[0].numpy()
    assert np.array_equal(rgb[0], decoded) and np.array_equal(rgb[2], decoded)
    assert np.array_equal(streamed(path, 3)[..., 1], decoded)


def test_streamed_statistics_of_a_16_bit_folder_are_those_of_its_scaled_pixels(tmp_path):
    path = FILES["16-bit PNG, full range"][0](tmp_path)
    mean, std = sampled_statistics([path], in_chans=1)
    assert mean[0] == pytest.approx(0.5, abs=0.01)
    assert std[0] == pytest.approx(RAMP.std(), abs=0.01)


def test_a_float_image_holding_nan_is_refused_in_one_line_naming_it(tmp_path):
    values = RAMP.astype(np.float32)
    values[3, 4] = np.nan
    path = write(tmp_path / "nan.tif", values, "F")
    for read in (
        lambda: decode_images([path]),
        lambda: streamed(path),
        lambda: sampled_statistics([path], 1),
    ):
        with pytest.raises(DataError, match=f"^image {path} holds NaN or infinite pixel values; [^\n]*$"):
            read()


def test_a_constant_16_bit_image_is_clipped_not_divided_by_zero(tmp_path):
    path = write(tmp_path / "white.png", np.full((8, 8), 60000, dtype=np.uint16))
    assert (decode_images([path], grayscale=True) == 255).all()


OPENS_OF_A_USERS_IMAGE = {  # every path that opens a user's image file, each given the one file
    "device-resident decode": lambda path: decode_images([path]),
    "datasets survey": lambda path: decode_sample([path]),
    "header sampling of data_mode=auto": lambda path: sampled_shape([path]),
    "streaming worker": lambda path: StreamingImages(
        [path], [0], transform=lambda img: img, in_chans=1
    ).image(0),
    "streamed statistics": lambda path: sampled_statistics([path], 1),
    "encoded bytes of an hf column": lambda path: decode_images([path.read_bytes()]),
    "predict": lambda path: check_image(path),
}


@pytest.mark.parametrize("path_name", OPENS_OF_A_USERS_IMAGE)
def test_an_image_between_one_and_two_times_the_pixel_limit_is_refused_from_its_header_on_every_path(
    tmp_path, monkeypatch, path_name
):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # PIL refuses past 200 pixels, only warns from 101
    big = write(tmp_path / "big.png", np.zeros((12, 12), np.uint8))  # 144 pixels
    decoded = []
    monkeypatch.setattr(Image.Image, "load", lambda self, *args: decoded.append(self.size))
    with pytest.raises(DataError, match="is larger than PIL's limit of 100 pixels .*it was not decoded"):
        OPENS_OF_A_USERS_IMAGE[path_name](big)
    assert decoded == []


def test_an_image_at_the_pixel_limit_is_decoded(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 144)
    exact = write(tmp_path / "exact.png", np.full((12, 12), 7, np.uint8))
    assert decode_images([exact], grayscale=True).unique().tolist() == [7]
