"""Work of one training batch's augmentation on the accelerator branch, counted on the CPU.

A TorchDispatchMode records every aten operation the batch augmentation runs and the elements each
writes (views write none): a launch count and a pixel-work count that do not depend on the machine.
The read-free (accelerator) branch is forced on the CPU, so the figures are those a CUDA step runs.

    python benchmarks/augment_ops.py            # DeiT preset (224 px) and paper 1's recipe_aug (32 px)

It then prints each recipe's op count at batch 16 and at batch 256 (32 px): equal when no op is launched
per image (`tests/gpu_path/test_step_launches.py` asserts it for a whole training step on fake CUDA).
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from convinit.data.augmentation.batch_augment import BatchAugment

VIEWS = {"view", "_unsafe_view", "expand", "permute", "unsqueeze", "squeeze", "select", "slice", "t", "alias",
         "transpose", "as_strided", "reshape", "detach", "unbind", "split", "_reshape_alias"}  # fmt: skip


class OpCounter(TorchDispatchMode):
    """Counts aten calls and the elements their outputs hold (views excluded from the element count)."""

    def __init__(self):
        super().__init__()
        self.calls, self.elements, self.kernels = Counter(), 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        self.calls[name] += 1
        if name not in VIEWS:
            self.kernels += 1
            outs = out if isinstance(out, (tuple, list)) else (out,)
            self.elements += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
        return out


def read_free(augment: BatchAugment) -> BatchAugment:
    """Force the accelerator branch on the CPU."""
    randaugment = augment.randaugment
    if hasattr(randaugment, "read_free"):
        randaugment.read_free = True
    elif hasattr(randaugment, "apply_everywhere"):
        randaugment.apply_on_selected = randaugment.apply_everywhere
    return augment


PRESETS = {
    "deit (224 px, batch 32)": (
        dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), out_size=(224, 224), train=True,
             resized_crop_scale=0.08, hflip=True, randaugment_n=2, randaugment_m=9, randaugment_mstd=0.5,
             random_erasing=0.25, randaugment_policy="timm"),
        (32, 3, 256, 256),
    ),
    "paper1 recipe_aug (32 px, batch 512)": (
        dict(mean=(0.491, 0.482, 0.447), std=(0.247, 0.243, 0.262), train=True, crop_padding=4, hflip=True,
             randaugment_n=2, randaugment_m=14, randaugment_policy="torchvision"),
        (512, 3, 32, 32),
    ),
}  # fmt: skip


CIFAR_STATS = dict(mean=(0.491, 0.482, 0.447), std=(0.247, 0.243, 0.262), train=True)
RECIPES = {
    "crop + flip": dict(crop_padding=4, hflip=True),
    "DeiT": dict(resized_crop_scale=0.08, hflip=True, randaugment_n=2, randaugment_m=9, randaugment_mstd=0.5,
                 random_erasing=0.25, randaugment_policy="timm"),
    "paper 1 recipe_aug": dict(resized_crop_scale=0.08, hflip=True, randaugment_n=2, randaugment_m=14,
                               randaugment_policy="torchvision"),
    "streamed finishing": dict(random_erasing=0.25),
}  # fmt: skip
BATCHES = (16, 256)


def ops_by_batch(options: dict, seed: int) -> list[int]:
    """Aten ops of one augmentation call at each of `BATCHES` (32 px), after a warm-up call."""
    totals = []
    for batch in BATCHES:
        whole, _ = count({**CIFAR_STATS, **options}, (batch, 3, 32, 32), seed)
        totals.append(sum(whole.calls.values()))
    return totals


def count(options: dict, shape: tuple[int, ...], seed: int) -> tuple[OpCounter, OpCounter]:
    """(whole augmentation, RandAugment alone) counters for one batch, after one warm-up batch."""
    augment = read_free(BatchAugment(**options))
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    augment(images)  # builds the lazily made crops
    whole, alone = OpCounter(), OpCounter()
    with whole:
        augment(images)
    x = torch.rand(shape[0], shape[1], *(options.get("out_size") or shape[2:]))
    if augment.randaugment is not None:
        with alone:
            augment.randaugment(x)
    return whole, alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=0, help="also list the N most frequent aten ops")
    args = parser.parse_args()
    for name, (options, shape) in PRESETS.items():
        whole, alone = count(options, shape, args.seed)
        pixels = shape[0] * shape[1] * (options.get("out_size") or shape[2:])[0] ** 2
        print(
            f"{name}: augmentation {sum(whole.calls.values())} aten ops ({whole.kernels} not views), "
            f"{whole.elements / pixels:.1f} elements written per input element; RandAugment alone "
            f"{sum(alone.calls.values())} aten ops ({alone.kernels} not views), "
            f"{alone.elements / pixels:.1f} per element"
        )
        if args.top:
            print("   ", ", ".join(f"{op} {n}" for op, n in alone.calls.most_common(args.top)))
    print(f"aten ops of one augmentation call at batch {' / '.join(map(str, BATCHES))} (32 px):")
    for name, options in RECIPES.items():
        print(f"  {name}: {' / '.join(f'{n:,}' for n in ops_by_batch(options, args.seed))}")


if __name__ == "__main__":
    main()
