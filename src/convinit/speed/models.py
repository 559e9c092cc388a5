"""The benchmarked models, each beside its timm twin of the same shape, and the step each one is timed on.

A twin has the same width, depth, heads, tokens and pooling, so any speed difference comes from the
implementation. Where a shape has no exact timm equivalent the spec says what differs (`note`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from convinit.errors import ConfigError
from convinit.models import create_model, list_models
from convinit.train.optim import fused_or_default

NUM_CLASSES = 10
INPUT = (3, 32, 32)  # CIFAR-sized: every benchmarked preset is a 32 px model


@dataclass(frozen=True)
class BenchModel:
    """A convinit model, its timm twin (if any) and the same-shape reference it is compared with."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    timm: Callable[[], nn.Module] | None = None
    note: str = ""

    def build(self) -> nn.Module:
        return create_model(self.name, num_classes=NUM_CLASSES, **self.kwargs)


def timm_vit(
    embed_dim: int,
    depth: int,
    num_heads: int,
    mlp_ratio: float,
    img_size: int = 32,
    patch_size: int = 2,
    in_chans: int = 3,
) -> Callable[[], nn.Module]:
    """timm's VisionTransformer shaped like a SimpleViT: no class token, mean pooling, bias-free Q/K/V."""

    def build() -> nn.Module:
        from timm.models.vision_transformer import VisionTransformer

        return VisionTransformer(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            num_classes=NUM_CLASSES,
            embed_dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            qkv_bias=False,
            class_token=False,
            global_pool="avg",
        )

    return build


def timm_convit_tiny_patch2_32() -> nn.Module:
    import timm

    return timm.create_model(
        "convit_tiny", pretrained=False, img_size=32, patch_size=2, num_classes=NUM_CLASSES
    )


def timm_convmixer_512_6() -> nn.Module:
    from timm.models.convmixer import ConvMixer

    return ConvMixer(dim=512, depth=6, kernel_size=5, patch_size=2, num_classes=NUM_CLASSES)


BENCH_MODELS = {
    spec.name: spec
    for spec in (
        BenchModel(
            "vit_tiny_patch2_32",
            timm=timm_vit(192, 12, 3, 4.0),
            note="timm twin: VisionTransformer 192/12/3 heads, class_token=False, global_pool=avg",
        ),
        BenchModel(
            "convit_tiny_patch2_32",
            timm=timm_convit_tiny_patch2_32,
            note="timm twin: convit_tiny(img_size=32, patch_size=2)",
        ),
        BenchModel(
            "simplevit",
            timm=timm_vit(512, 6, 8, 1.0),
            note="timm twin: VisionTransformer 512/6/8 heads, MLP 512, class_token=False, global_pool=avg",
        ),
        BenchModel(
            "convmixer",
            timm=timm_convmixer_512_6,
            note="timm twin: ConvMixer(dim=512, depth=6, kernel_size=5, patch_size=2)",
        ),
    )
}

# ConViT's same-shape ViT: the same preset with every GPSA block replaced by MHSA (the paper's "DeiT"
# ablation row), so the two differ in nothing but GPSA.
SAME_SHAPE_VIT = {"convit_tiny_patch2_32": {"local_up_to_layer": 0}}


def bench_models(names: list[str]) -> list[BenchModel]:
    """The specs for `names`; a ConfigError names the benchmarkable models if one is unknown."""
    unknown = [n for n in names if n not in BENCH_MODELS]
    if unknown:
        hint = "" if unknown[0] not in list_models() else " (it is a model, but has no benchmark twin)"
        raise ConfigError(f"cannot benchmark {unknown[0]!r}{hint}; choose from {', '.join(BENCH_MODELS)}")
    return [BENCH_MODELS[n] for n in names]


@dataclass
class StepSetup:
    """How a step runs: batch size, device, autocast dtype, compile and memory format."""

    batch_size: int
    device: torch.device
    dtype: torch.dtype | None  # autocast dtype, None for full precision
    compile: bool = False
    channels_last: bool = False
    input: tuple[int, ...] = INPUT  # (C, H, W) of one image


def prepared(model: nn.Module, setup: StepSetup) -> tuple[nn.Module, nn.Module]:
    """(module to call, module that owns the parameters) on the device in the asked memory format."""
    model = model.to(setup.device)
    if setup.channels_last:
        model = model.to(memory_format=torch.channels_last)
    runner = torch.compile(model) if setup.compile else model
    return runner, model


def random_batch(setup: StepSetup, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(setup.batch_size, *setup.input, generator=generator).to(setup.device)
    if setup.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, NUM_CLASSES, (setup.batch_size,), generator=generator).to(setup.device)
    return images, labels


class TrainStep:
    """One optimiser step (forward, backward, fused AdamW); fp16 adds a grad scaler.

    Called without arguments it trains on a fixed random batch (throughput); with a batch it trains on
    that (one epoch of real-shaped data). Images may be soft targets after mixup/cutmix.
    """

    def __init__(self, model: nn.Module, setup: StepSetup):
        self.setup = setup
        self.runner, self.model = prepared(model, setup)
        self.model.train()
        self.images, self.labels = random_batch(setup)
        # the trainer's fused AdamW for every row: the comparison is of the models, not of optimisers
        self.optimizer = fused_or_default(torch.optim.AdamW, list(self.model.parameters()), lr=1e-4)
        self.scaler = torch.amp.GradScaler(setup.device.type, enabled=setup.dtype == torch.float16)

    def __call__(self, images: torch.Tensor | None = None, targets: torch.Tensor | None = None) -> None:
        images = self.images if images is None else images
        targets = self.labels if targets is None else targets
        dtype = self.setup.dtype
        with torch.autocast(self.setup.device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(self.runner(images).float(), targets)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


def inference_step(model: nn.Module, setup: StepSetup) -> Callable[[], None]:
    """One forward pass in eval and inference mode."""
    runner, owner = prepared(model, setup)
    owner.eval()
    images, _ = random_batch(setup)

    def step() -> None:
        with (
            torch.inference_mode(),
            torch.autocast(setup.device.type, dtype=setup.dtype, enabled=setup.dtype is not None),
        ):
            runner(images)

    return step


def grouped_conv_backward_flop(
    grad_out_shape: list[int],
    x_shape: list[int],
    w_shape: list[int],
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: int,
    output_mask: list[bool],
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """Each gradient of a convolution (input, weight) costs what its forward does.

    torch.utils.flop_counter's own formula ignores `groups` in the weight gradient and so counts a
    depthwise convolution's (ConvMixer's spatial mixing) `groups` times over: 512x for ConvMixer-512.
    """
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def count_train_flops(model: nn.Module, setup: StepSetup) -> int:
    """FLOPs of one eager training step (forward + backward; the fused optimiser op is not counted) at
    `setup`'s batch size."""
    from torch.utils.flop_counter import FlopCounterMode

    step = TrainStep(model, replace(setup, compile=False))
    mapping = {torch.ops.aten.convolution_backward: grouped_conv_backward_flop}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        step()
    return int(counter.get_total_flops())


def train_flops(build: Callable[[], nn.Module], setup: StepSetup) -> int:
    """FLOPs of one training step, counted by torch.utils.flop_counter at batch 1 and 2 and extended
    linearly to the batch size (exact: every counted op is linear in the batch or independent of it,
    like ConViT's positional map), so counting costs two tiny steps instead of a full one.

    Counted on the uncompiled model: compilation fuses element-wise work but leaves the matmuls and
    convolutions the counter sees unchanged. Grouped convolutions' backward uses the corrected formula
    above.
    """
    one, two = (count_train_flops(build(), replace(setup, batch_size=b)) for b in (1, 2))
    return one + (two - one) * (setup.batch_size - 1)
