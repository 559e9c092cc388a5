"""Impulse init measured on real forward passes: attention mass on the target offset, per model.

Prints a table, never asserts. For each model: the closed form without images (fit on the pseudo-
input) and with a batch of 64 real training images (fit on the Q/K input each layer really sees),
both measured on 256 other images (test set) at the model's own alpha: target mass, argmax agreement,
normalised row entropy, mean attention distance (patches), Q/K weight scale (rms / default init rms)
and the seconds `initialize` took.

    python benchmarks/init_quality.py             # Fashion-MNIST (28 px, or 32 px x 3 channels) and digits
    python benchmarks/init_quality.py --quick     # fewer models
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F

from convinit import create_model, initialize
from convinit.data.datasets import load_dataset
from convinit.init.attention_sites import attention_slots
from convinit.init.measure import real_pass_quality

FASHION = dict(img_size=28, in_chans=1, patch_size=4, dim=64, depth=4, heads=4, dim_head=16, mlp_dim=128)
DIGITS = dict(img_size=8, in_chans=1, patch_size=1, dim=64, depth=4, heads=4, dim_head=16, mlp_dim=128)


def batches(name: str, rgb32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """64 training and 256 test images, normalised as for evaluation (optionally 32 px, 3 channels)."""
    data = load_dataset(name)
    mean, std = torch.tensor(data.mean).view(1, -1, 1, 1), torch.tensor(data.std).view(1, -1, 1, 1)
    picks = torch.linspace(0, len(data.train_images) - 1, 64).long()

    def prepare(images: torch.Tensor) -> torch.Tensor:
        x = (images.float() / 255 - mean) / std
        if rgb32:
            x = F.interpolate(x, size=32, mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
        return x

    return prepare(data.train_images[picks]), prepare(data.test_images[:256])


def timm_vit() -> torch.nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=32, patch_size=4, embed_dim=192, depth=12, num_heads=3, num_classes=10)


def models(quick: bool) -> list[tuple[str, str, dict]]:
    """(label, data, model arguments, or a timm row's init options) per row of the table."""
    rows = [(f"Fashion blend alpha {a}", "fashion", dict(FASHION, qk_input="blend", alpha=a)) for a in
            ((0.0, 0.1, 0.5) if quick else (0.0, 0.1, 0.3, 0.5))]  # fmt: skip
    rows += [("digits blend alpha 0.1 (demo)", "digits", dict(DIGITS, qk_input="blend", alpha=0.1)),
             ("digits qk_input=x", "digits", dict(DIGITS, qk_input="x"))]  # fmt: skip
    if not quick:
        rows += [("vit_tiny_patch2_32 blend alpha 0.1", "fashion32", dict(qk_input="blend", alpha=0.1)),
                 ("vit_tiny_patch2_32 qk_input=x", "fashion32", dict(qk_input="x")),
                 ("timm VisionTransformer (Ti, patch 4), default", "fashion32", {}),
                 ("timm VisionTransformer, pos_embed kept", "fashion32", dict(learned_pos_embed="keep")),
                 ("timm VisionTransformer, sin-cos P", "fashion32", dict(learned_pos_embed="sincos")),
                 ("transformers ViT (Ti, patch 4), default", "fashion32", {})]  # fmt: skip
    return rows


def build(label: str, kwargs: dict) -> torch.nn.Module:
    """The row's model; timm / transformers rows take their init options from kwargs instead."""
    torch.manual_seed(0)
    if label.startswith("timm"):
        return timm_vit()
    if label.startswith("transformers"):
        from transformers import ViTConfig, ViTForImageClassification

        config = ViTConfig(image_size=32, patch_size=4, num_channels=3, hidden_size=192, num_hidden_layers=12,
                           num_attention_heads=3, intermediate_size=768, num_labels=10)  # fmt: skip
        return ViTForImageClassification(config)
    name = "vit_tiny_patch2_32" if label.startswith("vit_tiny") else "simplevit"
    return create_model(name, num_classes=10, **kwargs)


def measure(label: str, kwargs: dict, fit: torch.Tensor | None, test: torch.Tensor) -> str:
    model = build(label, kwargs)
    options = kwargs if label.startswith(("timm", "transformers")) else {}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the low-mass rows are the point of the table
        report = initialize(model, "impulse", seed=0, images=fit, **options)
    seconds = time.perf_counter() - start
    offsets = [[tuple(h["offset"]) for h in layer["heads"]] for layer in report["layers"]]
    real = real_pass_quality(model, attention_slots(model, "impulse"), test, offsets)
    fitted = "64 images" if fit is not None else "pseudo-input"
    return (f"| {label} | {fitted} | {real['mean_mass']:.3f} | {real['mean_argmax_agreement']:.3f} | "
            f"{real['mean_entropy']:.3f} | {real['mean_distance']:.2f} | {report['mean_weight_scale']:.2f} | "
            f"{seconds:.2f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="only the 28 px Fashion-MNIST and digits models")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    data = {"fashion": batches("fashion-mnist"), "digits": batches("digits")}
    if not args.quick:
        data["fashion32"] = batches("fashion-mnist", rgb32=True)
    print("| model | fitted on | target mass | argmax agreement | entropy | distance | weight scale "
          "| init s |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, name, kwargs in models(args.quick):
        fit, test = data[name]
        for images in (None, fit):
            print(measure(label, kwargs, images, test), flush=True)


if __name__ == "__main__":
    main()
