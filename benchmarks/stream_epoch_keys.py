"""Main-process cost of one streamed ImageNet epoch's sample keys (file index, augmentation seed).

python benchmarks/stream_epoch_keys.py     # 1,281,167 images, DeiT's repeated augmentation off and on
"""

from __future__ import annotations

import time

import numpy as np

from convinit.data.streamed_loader import StreamLoader, sample_seeds

IMAGENET_TRAIN = 1_281_167


class Sized:
    def __len__(self) -> int:
        return IMAGENET_TRAIN


def seconds(fn) -> float:
    tic = time.perf_counter()
    fn()
    return time.perf_counter() - tic


def main() -> None:
    per_sample = seconds(lambda: [np.random.SeedSequence([0, 1, p]).generate_state(1) for p in range(20_000)])
    per_sample /= 20_000
    print(
        f"a SeedSequence per sample: {per_sample * 1e6:.1f} us, {per_sample * IMAGENET_TRAIN:.1f} s per epoch"
    )
    vectorised = seconds(lambda: sample_seeds(0, 1, np.arange(IMAGENET_TRAIN)))
    print(f"vectorised seeds: {vectorised:.3f} s per epoch")
    for repeats in (1, 3):
        loader = StreamLoader(Sized(), 512, shuffle=True, drop_last=True, repeats=repeats)
        loader.set_epoch(1)
        loader.keys()  # imports timm's RepeatAugSampler
        keys = seconds(loader.keys)
        batches = seconds(lambda loader=loader: sum(1 for _ in loader.batch_keys()))
        print(f"repeats={repeats}: keys {keys:.2f} s, every batch of keys {batches:.2f} s per epoch")


if __name__ == "__main__":
    main()
