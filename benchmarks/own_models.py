"""Impulse init on timm and transformers ViTs with default options, measured on real held-apart images.

Prints three Markdown tables, never asserts:

1. per family and dataset (D 64, depth 4, 4 heads, 4 px patches; Fashion-MNIST at 28 px, digits
   upsampled to 32 px): attention mass on each head's target patch (patch rows) on the 16 held-apart
   images of the 64-image batch and on 256 test images, argmax agreement, the mass patch rows give to
   prefix tokens, Q/K weight scale and the seconds `initialize` took;
2. the learned position table's handling (`learned_pos_embed` keep / sincos / scale, the default) on
   the D 64 model and on timm's ViT-Ti at 32 px / patch 4, both datasets;
3. a new user's two models, one `initialize(model, "impulse", images=batch)` call each: timm's
   `vit_tiny_patch16_224` at 32 px with 4 px patches and a transformers `ViTForImageClassification` of
   the same shape, on 64 Fashion-MNIST training images (32 px, 3 channels).

    python benchmarks/own_models.py
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F

from convinit import initialize
from convinit.data.datasets import load_dataset
from convinit.init.attention_sites import attention_slots
from convinit.init.measure import real_pass_quality

SMALL = dict(embed_dim=64, depth=4, num_heads=4, num_classes=10)


def batches(name: str, size: int, channels: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """64 training and 256 test images, normalised as for evaluation, at `size` px."""
    data = load_dataset(name)
    mean, std = torch.tensor(data.mean).view(1, -1, 1, 1), torch.tensor(data.std).view(1, -1, 1, 1)
    picks = torch.linspace(0, len(data.train_images) - 1, 64).long()

    def prepare(images: torch.Tensor) -> torch.Tensor:
        x = (images.float() / 255 - mean) / std
        if x.shape[-1] != size:
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x.repeat(1, channels, 1, 1)

    return prepare(data.train_images[picks]), prepare(data.test_images[:256])


def timm_vit(size: int, **kwargs) -> torch.nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=size, patch_size=4, in_chans=1, **SMALL, **kwargs)


def deit_distilled(size: int) -> torch.nn.Module:
    from timm.models.deit import VisionTransformerDistilled

    return VisionTransformerDistilled(img_size=size, patch_size=4, in_chans=1, **SMALL)


def hf_vit(size: int, channels: int = 1, dim: int = 64, depth: int = 4, heads: int = 4) -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=size, patch_size=4, num_channels=channels, hidden_size=dim,
                       num_hidden_layers=depth, num_attention_heads=heads, intermediate_size=4 * dim,
                       num_labels=10)  # fmt: skip
    return ViTForImageClassification(config)


FAMILIES = {
    "timm ViT, class token": lambda size: timm_vit(size),
    "timm ViT, avg pool, no class token": lambda size: timm_vit(size, class_token=False, global_pool="avg"),
    "timm ViT, no_embed_class, 4 registers": lambda size: timm_vit(size, no_embed_class=True, reg_tokens=4),
    "timm ViT, qk_norm": lambda size: timm_vit(size, qk_norm=True),
    "timm DeiT distilled": deit_distilled,
    "transformers ViTForImageClassification": hf_vit,
}


def row(label: str, model: torch.nn.Module, fit: torch.Tensor, test: torch.Tensor, **options) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = initialize(model, "impulse", images=fit, seed=0, **options)
    offsets = [[tuple(h["offset"]) for h in layer["heads"]] for layer in report["layers"]]
    on_test = real_pass_quality(model, attention_slots(model, "impulse"), test, offsets)
    held = report["real_pass_held_out"]
    prefix = held.get("mean_prefix_key_mass")
    return (f"| {label} | {report['real_pass']['mean_mass']:.3f} | {held['mean_mass']:.3f} | "
            f"{on_test['mean_mass']:.3f} | {on_test['mean_argmax_agreement']:.3f} | "
            f"{'-' if prefix is None else f'{prefix:.3f}'} | {report['mean_weight_scale']:.1f} | "
            f"{report['seconds']:.2f} |")  # fmt: skip


HEADER = ("| {} | mass, fitted | mass, held apart | mass, 256 test | argmax, test | prefix keys "
          "| weight scale | init s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")  # fmt: skip


def main() -> None:
    threads = torch.get_num_threads()
    print(f"torch threads {threads}, load average {os.getloadavg()[0]:.1f}\n")
    print(HEADER.format("family (D 64, depth 4), dataset"))
    for dataset, size in (("fashion-mnist", 28), ("digits", 32)):
        fit, test = batches(dataset, size)
        for label, build in FAMILIES.items():
            torch.manual_seed(0)
            print(row(f"{label}, {dataset}", build(fit.shape[-1]), fit, test), flush=True)
    import timm

    print("\n" + HEADER.format("learned position table handling (learned_pos_embed), model, dataset"))
    for dataset in ("fashion-mnist", "digits"):
        small = batches(dataset, 28 if dataset == "fashion-mnist" else 32)
        tiny = batches(dataset, 32, channels=3)
        for mode in ("keep", "sincos", "scale"):
            torch.manual_seed(0)
            print(row(f"{mode}, timm ViT D 64 depth 4, {dataset}", timm_vit(small[0].shape[-1]), *small,
                      learned_pos_embed=mode))  # fmt: skip
            torch.manual_seed(0)
            model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4, num_classes=10)
            print(row(f"{mode}, timm ViT-Ti 32 px patch 4, {dataset}", model, *tiny, learned_pos_embed=mode))

    fit, test = batches("fashion-mnist", 32, channels=3)
    print("\n" + HEADER.format("a new user's model, Fashion-MNIST 32 px"))
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4, num_classes=10)
    print(row('timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4)', model, fit, test))
    torch.manual_seed(0)
    model = hf_vit(32, channels=3, dim=192, depth=12, heads=3)
    print(row("transformers ViTForImageClassification, ViT-Ti shape", model, fit, test))


if __name__ == "__main__":
    main()
