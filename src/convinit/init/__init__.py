"""Weight initialisation schemes, kept apart from the models.

`initialize(model, scheme, **options)` applies a registered scheme in place and returns its report
(a JSON-serialisable dict: at least `scheme` and `seconds`). Each scheme is one module of
`convinit.init.schemes` (impulse, mimetic, random: the model's own default init; scaled-position:
impulse's position step alone) that registers itself with `register_scheme`; the registry finds them
all on its first lookup.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import torch
import torch.nn as nn

from convinit.init.measure import untargeted_real_pass
from convinit.init.registry import SCHEMES, list_schemes, register_scheme


def initialize(
    model: nn.Module, scheme: str = "random", images: torch.Tensor | None = None, **options: Any
) -> dict[str, Any]:
    """Initialise `model` in place with `scheme`; returns the scheme's report plus the seconds taken.

    images: a (B, C, H, W) batch of real images, preprocessed as for evaluation. Schemes that take
    `images` fit on them (impulse: `real_pass` on the images fitted on, `real_pass_held_out` on the
    quarter of the batch held apart); for the other schemes the report gains `real_pass`, the attention
    statistics of real forward passes (`convinit.init.measure`), for models with attention layers.
    The fit uses torch's intra-op threads (`torch.get_num_threads()`) and starts no others.
    """
    fn = SCHEMES.get(scheme)  # a ConfigError listing the schemes if there is none of that name
    if images is not None and "images" in inspect.signature(fn).parameters:
        options["images"] = images
    start = time.perf_counter()
    report = dict(fn(model, **options))
    report["scheme"] = scheme
    report["seconds"] = time.perf_counter() - start
    if images is not None and "real_pass" not in report:
        real = untargeted_real_pass(model, images)
        if real is not None:
            report["real_pass"] = real
    return report


__all__ = ["initialize", "list_schemes", "register_scheme"]
