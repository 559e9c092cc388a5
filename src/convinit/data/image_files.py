"""Decoding image files into one uint8 tensor, and the one-line error for a file that is not an image.

Used by the readers of Tiny-ImageNet, `folder` and `hf`, by the streamed loader and by `predict`. It
registers no dataset, so it sits beside `readers/` rather than in it: the dataset registry imports every
module of `readers/`, and each of them is a reader. An image source is a path or the encoded bytes of
one file (as a `datasets` Image column stores it).

Every open of a user's image goes through `open_image`, which holds one rule: an image of more pixels than
PIL's limit (`Image.MAX_IMAGE_PIXELS`) is refused from its header, before a pixel is decoded. PIL itself
refuses only beyond twice its limit and merely warns in between.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

if TYPE_CHECKING:  # torch is imported where it is used: listing datasets needs none
    import torch

from convinit.errors import DataError

ImageSource = Path | bytes
# what PIL raises for a file that is not a whole image, or one over its decompression-bomb limit
UNREADABLE = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


DATASET_REMEDY = "remove it from the dataset"


def unreadable_image(path: ImageSource | str, exc: BaseException, remedy: str = DATASET_REMEDY) -> DataError:
    """The one-line error for an image file that cannot be used, naming it."""
    if isinstance(exc, DataError):  # already names it (e.g. NaN pixels)
        return exc
    where = f"image {path}" if not isinstance(path, bytes) else "an image of the dataset"
    if isinstance(exc, Image.DecompressionBombError):
        return DataError(
            f"{where} is larger than PIL's limit of {Image.MAX_IMAGE_PIXELS} pixels (a decompression bomb?); "
            f"it was not decoded: resize it or {remedy}"
        )
    detail = " ".join(str(exc).split())[:200] or type(exc).__name__
    return DataError(f"{where} cannot be decoded ({detail}); replace it or {remedy}")


def open_image(source: ImageSource, remedy: str = DATASET_REMEDY) -> Image.Image:
    """PIL's lazy open (the header only) of a file or of an encoded file's bytes; one line naming the
    file if it is not an image or has more pixels than PIL's limit (refused here from the header, where
    PIL itself only warns up to twice the limit; the limit is read at each call, so a caller may set it)."""
    try:
        with warnings.catch_warnings():  # PIL's warning between 1x and 2x its limit: judged below instead
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
    except UNREADABLE as exc:
        raise unreadable_image(source, exc, remedy) from exc
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and img.width * img.height > limit:
        img.close()
        raise unreadable_image(source, Image.DecompressionBombError(f"{img.size} pixels"), remedy)
    return img


# PIL's modes of more than 8 bits per value: 16-bit and 32-bit integers, 32-bit floats (one channel)
HIGH_BIT_MODES = {"I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


def eight_bit(img: Image.Image, source: ImageSource | str) -> Image.Image:
    """A 16-bit, 32-bit or float image as 8-bit 'L', scaled by the range its values really span: values
    already within 0..255 (floats within 0..1, times 255) are kept, others mapped linearly from their
    own min..max onto 0..255. PIL's own conversion clips at 255, which turned such images white.
    An image holding NaN or infinite values is refused in one line naming it."""
    values = np.asarray(img).astype(np.float32)  # precise enough for 8 bits, half float64's memory
    if not np.isfinite(values).all():
        where = f"image {source}" if not isinstance(source, bytes) else "an image of the dataset"
        raise DataError(
            f"{where} holds NaN or infinite pixel values; replace it or remove it from the dataset"
        )
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if img.mode == "F" and low >= 0 and high <= 1:
        values = values * 255
    elif high > low and not (low >= 0 and high <= 255):
        values = (values - low) * (255 / (high - low))
    return Image.fromarray(np.rint(values).clip(0, 255).astype(np.uint8), "L")


def to_mode(img: Image.Image, mode: str, source: ImageSource | str) -> Image.Image:
    """`img` converted to `mode` ('L' or 'RGB'), high-bit-depth and float images scaled to 8 bits first."""
    if img.mode in HIGH_BIT_MODES:
        img = eight_bit(img, source)
    return img.convert(mode)


SURVEY_SAMPLE = 16  # images `convinit datasets` decodes, spread over the files (so over the classes)


def decode_sample(paths: list[ImageSource], count: int = SURVEY_SAMPLE) -> int:
    """Decode `count` of `paths`, evenly spread (PIL only, no torch); DataError naming a file that fails."""
    sample = paths[:: max(1, len(paths) // count)][:count]
    for path in sample:
        with open_image(path) as img:
            try:
                img.load()
            except UNREADABLE as exc:
                raise unreadable_image(path, exc) from exc
    return len(sample)


IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def image_files(folder: Path) -> list[Path]:
    """Image files directly or recursively under `folder`, sorted for a stable order.

    Hidden files and folders are skipped: macOS leaves `._name.png` metadata files beside the images.
    """
    return sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in IMAGE_SUFFIXES
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def most_common_size(paths: list[ImageSource]) -> tuple[int, int]:
    """(height, width) shared by most files (reads headers only); ties go to the first seen."""
    sizes = []
    for path in paths:
        with open_image(path) as img:
            sizes.append(img.size)
    width, height = Counter(sizes).most_common(1)[0][0]
    return height, width


def decode_images(
    paths: list[ImageSource], size: tuple[int, int] | None = None, grayscale: bool = False
) -> torch.Tensor:
    """Decode `paths` into (N, C, H, W) uint8; images of another size are resized (bilinear) to `size`.

    `size` defaults to the most common size among the files, so a folder of mixed sizes still loads.
    Each image is converted to an array as soon as it is decoded, so memory holds one copy of the data.
    """
    import torch

    mode = "L" if grayscale else "RGB"
    height, width = size if size is not None else most_common_size(paths)
    out = np.empty((len(paths), height, width, 1 if grayscale else 3), dtype=np.uint8)  # (N, H, W, C)
    for i, path in enumerate(paths):
        with open_image(path) as img:
            try:
                img = to_mode(img, mode, path)
            except UNREADABLE as exc:  # truncated or corrupt past its header
                raise unreadable_image(path, exc) from exc
            if img.size != (width, height):
                img = img.resize((width, height), Image.BILINEAR)
            out[i] = np.asarray(img).reshape(height, width, -1)
    return torch.from_numpy(np.ascontiguousarray(out.transpose(0, 3, 1, 2)))  # (N, C, H, W)


GRAYSCALE_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"}


def all_grayscale(paths: list[ImageSource]) -> bool:
    """True if every file is stored as a single-channel image (reads headers only)."""
    for path in paths:
        with open_image(path) as img:
            if img.mode not in GRAYSCALE_MODES:
                return False
    return True
