"""Bring your own ViT: impulse-initialise a timm VisionTransformer and check its attention.

    pip install "convinit[timm]" && python examples/custom_model.py

convinit.initialize works on any timm VisionTransformer (fused qkv, learned or sin-cos position
embedding, with or without a class token: the fit is done on the patch tokens). Other architectures are
refused with a one-line error that names the supported ones.
"""

from __future__ import annotations

import torch
from timm.models.vision_transformer import VisionTransformer

import convinit


def main() -> None:
    torch.manual_seed(0)
    # your own model: a small ViT for 32x32 images, 4x4 patches (an 8x8 grid), 3 heads
    model = VisionTransformer(img_size=32, patch_size=4, num_classes=10, embed_dim=96, depth=4, num_heads=3)
    report = convinit.initialize(model, "impulse", kernel_size=3, offsets="centre_first")
    print(f"impulse init of a timm ViT in {report['seconds']:.2f} s")
    print(f"mean attention mass on the target offset: {report['mean_mass']:.3f}")
    print(f"argmax agreement with the target convolution: {report['mean_argmax_agreement']:.3f}")
    for layer in report["layers"][:2]:
        offsets = [tuple(head["offset"]) for head in layer["heads"]]
        print(f"layer {layer['layer']}: head offsets {offsets}")
    logits = model(torch.randn(2, 3, 32, 32))
    print("forward pass:", tuple(logits.shape))


if __name__ == "__main__":
    main()
