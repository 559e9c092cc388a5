"""Your own timm or transformers ViT, convolutional at step 0: impulse init fitted on real images, then
convinit's trainer.

    pip install "convinit[timm,transformers]"
    python examples/own_vit.py                 # the two inits, then 2 short epochs of the timm model
    python examples/own_vit.py --no-train      # the inits only (seconds)

`convinit.initialize(model, "impulse", images=batch)` with no options: the model's learned position
table is scaled so that position can steer attention, each layer's Q/K weights are fitted on what the
layer really receives from the batch, and the report gives the attention mass on each head's target
patch on the images fitted on and on a held-apart quarter of the batch. To train your own model with
convinit's trainer, register its builder (the three shape arguments with defaults) and name it.
"""

from __future__ import annotations

import argparse

import timm
import torch
from transformers import ViTConfig, ViTForImageClassification

import convinit
from convinit.config import build_config
from convinit.data import load_dataset
from convinit.models import register_model
from convinit.models.external import TransformersClassifier
from convinit.train import train


def training_images(count: int = 64) -> torch.Tensor:
    """`count` Fashion-MNIST training images, normalised as for evaluation (what the trainer fits on)."""
    data = load_dataset("fashion-mnist")
    mean, std = torch.tensor(data.mean).view(1, -1, 1, 1), torch.tensor(data.std).view(1, -1, 1, 1)
    picks = torch.randperm(len(data.train_images), generator=torch.Generator().manual_seed(0))[:count]
    return (data.train_images[picks].float() / 255 - mean) / std


def my_timm_vit(num_classes: int = 10, img_size: int = 28, in_chans: int = 1) -> torch.nn.Module:
    """Your model: timm's ViT-Ti, for 28 px grey images in 4 px patches (a 7x7 grid)."""
    return timm.create_model(
        "vit_tiny_patch16_224", img_size=img_size, patch_size=4, in_chans=in_chans, num_classes=num_classes
    )


def my_transformers_vit(num_classes: int = 10, img_size: int = 28, in_chans: int = 1) -> torch.nn.Module:
    """Your model: a transformers ViT of the same shape (it returns logits through the wrapper)."""
    shape = dict(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768)
    config = ViTConfig(
        image_size=img_size, patch_size=4, num_channels=in_chans, num_labels=num_classes, **shape
    )
    return TransformersClassifier(ViTForImageClassification(config))


def show(name: str, report: dict) -> None:
    fitted, held = report["real_pass"], report["real_pass_held_out"]
    print(
        f"{name}: impulse init in {report['seconds']:.1f} s; "
        f"position table {report['position']['pos_embed']}; "
        f"attention mass on the target patch {fitted['mean_mass']:.2f} on the {fitted['images']} images "
        f"fitted on, {held['mean_mass']:.2f} on {held['images']} held apart (chance about 0.02)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-train", action="store_true", help="initialise only")
    args = parser.parse_args()
    images = training_images()
    for name, build in (("timm", my_timm_vit), ("transformers", my_transformers_vit)):
        torch.manual_seed(0)
        show(name, convinit.initialize(build(), "impulse", images=images))
    if args.no_train:
        return
    register_model(my_timm_vit)  # now `model=my_timm_vit` names it, like convinit's own presets
    cfg = build_config(dict(model="my_timm_vit", init="impulse", dataset="fashion-mnist", per_class=100,
                            epochs=2, batch_size=64, eval_every=0, device="cpu"))  # fmt: skip
    run = train(cfg, run_dir="runs/own_vit", overwrite=True)
    print(f"trained 2 epochs on 1,000 images: {run.metrics[-1]}")


if __name__ == "__main__":
    main()
