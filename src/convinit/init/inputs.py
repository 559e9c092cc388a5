"""What `convinit.initialize` checks before it changes anything, and how it undoes a scheme that fails.

An init fits weights on what it is given: NaN or huge images, integer pixels, the wrong channels or
size, or a model already holding NaN weights end deep inside a solver (`linalg.svd` does not
converge) or in NaN figures. Each is refused first, in one line (`checked_images`, `check_weights`).
Whatever still fails inside a scheme leaves the model as it was: `ModelSnapshot` keeps a copy of every
parameter and buffer (and which objects they were) and puts it back, and a report with a NaN or an
inf in it counts as a failure (`check_finite_report`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.positions import learned_tensors
from convinit.models.hf_layout import hf_vit_backbone

MAX_PIXEL = 1e6  # preprocessed images are about -3..3 (0..255 unnormalised); beyond this a fit overflows


def pair(size: Any) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def expected_input(model: nn.Module) -> tuple[int | None, tuple[int, int] | None]:
    """(channels, (H, W)) the model takes, as far as it says (None: any, or not known)."""
    backbone = hf_vit_backbone(model)
    if backbone is not None:
        return backbone.config.num_channels, pair(backbone.config.image_size)
    if isinstance(getattr(model, "in_chans", None), int) and getattr(model, "img_size", None) is not None:
        return model.in_chans, pair(model.img_size)  # convinit's SimpleViT
    embed = getattr(model, "patch_embed", None)
    proj = getattr(embed, "proj", None)
    if isinstance(proj, nn.Conv2d):  # timm's PatchEmbed
        fixed = getattr(embed, "strict_img_size", False) and not getattr(embed, "dynamic_img_size", False)
        size = getattr(embed, "img_size", None)
        return proj.in_channels, pair(size) if fixed and size is not None else None
    conv = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
    return (conv.in_channels if conv is not None else None), None


def checked_images(model: nn.Module, images: Any) -> torch.Tensor:
    """`images` as a (B, C, H, W) tensor of the model's float type, or a one-line ConfigError: not a
    tensor, no data (meta), not floating point, the wrong shape, channels or size, NaN, inf or huge."""
    if not isinstance(images, torch.Tensor):
        raise ConfigError(
            f"images must be a torch.Tensor (B, C, H, W), got {type(images).__name__}; "
            "convert it with torch.as_tensor(...).float() and normalise it as for evaluation"
        )
    if images.is_meta:
        raise ConfigError("images are on the meta device (no data); pass real image tensors")
    if not images.is_floating_point():
        raise ConfigError(
            f"images must be floating point, preprocessed as for evaluation, got {images.dtype} "
            "(scale integer pixels to [0, 1] and normalise them first)"
        )
    if images.dim() != 4 or len(images) == 0:
        raise ConfigError(f"images must be a non-empty (B, C, H, W) batch, got shape {tuple(images.shape)}")
    channels, size = expected_input(model)
    if channels is not None and images.shape[1] != channels:
        raise ConfigError(f"images have {images.shape[1]} channels but the model takes {channels}")
    if size is not None and tuple(images.shape[2:]) != size:
        raise ConfigError(f"images are {tuple(images.shape[2:])} pixels but the model takes {size}")
    finite = torch.isfinite(images)
    if not bool(finite.all()):
        raise ConfigError(
            f"images hold {int((~finite).sum())} NaN or infinite values; initialise on finite images"
        )
    largest = float(images.abs().max())
    if largest > MAX_PIXEL:
        raise ConfigError(
            f"images reach {largest:.3g}; initialise on images preprocessed as for evaluation "
            f"(at most {MAX_PIXEL:g} in size)"
        )
    weight = next((p for p in model.parameters() if p.is_floating_point()), None)
    return images if weight is None else images.to(weight.dtype)


def check_weights(model: nn.Module) -> None:
    """A model whose weights hold no data (meta) or NaN/inf is refused, naming the first such tensor;
    the position table and prefix tokens are left to the schemes, which re-draw uninitialised ones."""
    redrawn = {id(tensor) for tensor, _ in learned_tensors(model).values()}
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_meta:
            raise ConfigError(
                f"the model's {name} is on the meta device (no data); build it on a real device"
            )
        if (
            tensor.is_floating_point()
            and id(tensor) not in redrawn
            and not bool(torch.isfinite(tensor).all())
        ):
            raise ConfigError(
                f"the model's {name} holds NaN or infinite values; initialise a model with finite weights"
            )


def check_written_weights(model: nn.Module, scheme: str) -> None:
    """After a scheme ran: every floating-point parameter and buffer finite (a finite report can sit on
    an inf weight, e.g. a position table scaled by inf), else a ConfigError naming the first one."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ConfigError(
                f"{scheme} init wrote NaN or infinite values into the model's {name}; "
                "the model was left as it was"
            )


def trial_forward(model: nn.Module, images: torch.Tensor) -> None:
    """One image through the model (eval mode, no gradients): images it cannot take are refused here
    in one line, not midway through a scheme."""
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    try:
        with torch.no_grad():
            model(images[:1].to(device))
    except Exception as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ConfigError(f"images of shape {tuple(images.shape)} do not fit the model: {detail}") from exc
    finally:
        model.train(was_training)


def non_finite_figure(report: Any, path: str = "report") -> str | None:
    """The path of the first NaN or infinite number in a report (nested dicts and lists), or None."""
    if isinstance(report, float) and not math.isfinite(report):
        return f"{path} = {report}"
    if isinstance(report, dict):
        items = report.items()
    elif isinstance(report, list | tuple):
        items = enumerate(report)
    else:
        return None
    for key, value in items:
        found = non_finite_figure(value, f"{path}[{key!r}]")
        if found:
            return found
    return None


def check_finite_report(report: dict[str, Any], scheme: str) -> None:
    found = non_finite_figure(report)
    if found:
        raise ConfigError(f"{scheme} init gave a non-finite figure ({found}); the model was left as it was")


class ModelSnapshot:
    """Every module's parameters, buffers, submodules and mode as they are now, to put back on failure."""

    def __init__(self, model: nn.Module):
        self.modules = [
            (m, dict(m._parameters), dict(m._buffers), dict(m._modules), m.training) for m in model.modules()
        ]
        self.values = {
            id(t): (t.detach().clone(), t.requires_grad)
            for m in model.modules()
            for t in [*m._parameters.values(), *m._buffers.values()]
            if t is not None
        }

    def restore(self) -> None:
        with torch.no_grad():
            for module, parameters, buffers, children, training in self.modules:
                for store, saved in ((module._parameters, parameters), (module._buffers, buffers),
                                     (module._modules, children)):  # fmt: skip
                    store.clear()
                    store.update(saved)
                module.training = training
                for tensor in [*parameters.values(), *buffers.values()]:
                    if tensor is not None:
                        value, requires_grad = self.values[id(tensor)]
                        if tensor.shape == value.shape:
                            tensor.copy_(value)  # in place: views of the weights stay valid
                        else:
                            tensor.data = value
                        tensor.requires_grad_(requires_grad)
