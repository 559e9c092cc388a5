"""scikit-learn's bundled 8x8 digits: the embedded dataset that needs no network.

1,797 images of 8x8 pixels with values 0..16, scaled to 0..255. The split is fixed and stratified:
1,000 training and 797 test images (seed 0), so every run on `digits` sees the same test set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convinit.data.datasets import DatasetInfo, ImageDataset, KnownShape, register_dataset

TRAIN_SIZE = 1000


def read_digits(root: Path | None = None, download: bool = False) -> ImageDataset:
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # (1797, 1, 8, 8)
    labels = bunch.target.astype(np.int64)
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), train_size=TRAIN_SIZE, stratify=labels, random_state=0
    )
    return ImageDataset(
        name="digits",
        train_images=torch.from_numpy(images[np.sort(train_idx)]),
        train_labels=torch.from_numpy(labels[np.sort(train_idx)]),
        test_images=torch.from_numpy(images[np.sort(test_idx)]),
        test_labels=torch.from_numpy(labels[np.sort(test_idx)]),
        classes=[str(i) for i in range(10)],
    )


register_dataset(
    DatasetInfo(
        name="digits",
        reader=read_digits,
        how_to_obtain="it ships with scikit-learn (pip install scikit-learn)",
        needs_dir=False,
        shape=KnownShape(num_classes=10, in_chans=1, side=8, train_images=1000),
    )
)
