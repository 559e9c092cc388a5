"""Weight initialisation schemes, kept apart from the models.

`initialize(model, scheme, **options)` applies a registered scheme in place and returns its report
(a JSON-serialisable dict: at least `scheme` and `seconds`). Each scheme is one module of
`convinit.init.schemes` (impulse, mimetic, random: the model's own default init; scaled-position:
impulse's position step alone) that registers itself with `register_scheme`; the registry finds them
all on its first lookup.

On a model with no plain attention layer left (a ViT converted to GPSA in every block,
`attention_sites.no_attention_left`) each scheme does what is honest (docs/method.md §9): `impulse` and
`mimetic`, which act on attention layers only, are refused in one line before any work
(`check_scheme_applies`); `random` and `scaled-position` run, and their report says in
`no_attention_left` that no attention layer was left to fit or measure (no `real_pass` figures).
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.init.attention_sites import check_scheme_applies, no_attention_left
from convinit.init.inputs import (
    ModelSnapshot,
    check_finite_report,
    check_weights,
    check_written_weights,
    checked_images,
    trial_forward,
)
from convinit.init.measure import untargeted_real_pass
from convinit.init.registry import SCHEMES, InitSpec, init_spec, list_schemes, register_scheme


def initialize(
    model: nn.Module, scheme: str = "random", images: torch.Tensor | None = None, **options: Any
) -> dict[str, Any]:
    """Initialise `model` in place with `scheme`; returns the scheme's report plus the seconds taken.

    images: a (B, C, H, W) batch of real images, preprocessed as for evaluation. Schemes that take
    `images` fit on them (impulse: `real_pass` on the images fitted on, `real_pass_held_out` on the
    quarter of the batch held apart); for the other schemes the report gains `real_pass`, the attention
    statistics of real forward passes (`convinit.init.measure`), for models with attention layers.
    The fit uses torch's intra-op threads (`torch.get_num_threads()`) and starts no others.

    Checked first, each refused in one line (ConfigError): an option the scheme does not take, of the
    wrong type or out of its range; a scheme that acts on attention layers only, on a model with none
    left (`check_scheme_applies`); images that are not a floating-point (B, C, H, W) tensor of the
    model's channels and size, or hold NaN, inf or huge values; a model without parameters or holding
    NaN/inf weights. All or nothing: if the scheme fails, writes a NaN or inf weight or reports a NaN or
    inf figure, every parameter and buffer of the model is put back as it was and a ConfigError raised.
    """
    init_spec(scheme, options)  # an unknown scheme or option: one ConfigError line, the model untouched
    fn = SCHEMES.get(scheme)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"initialize takes a torch.nn.Module, got {type(model).__name__}")
    check_scheme_applies(model, scheme)
    if next(model.parameters(), None) is None:
        raise ConfigError(f"the {type(model).__name__} given to initialize has no parameters to initialise")
    check_weights(model)
    if images is not None:
        images = checked_images(model, images)
        trial_forward(model, images)
        if "images" in inspect.signature(fn).parameters:
            options["images"] = images
    snapshot = ModelSnapshot(model)
    try:  # the scheme called here, not in a helper: its warnings' stacklevel points at our caller
        start = time.perf_counter()
        report = complete_report(model, scheme, dict(fn(model, **options)), start, images)
        check_written_weights(model, scheme)  # what it wrote, not only what it reports
    except BaseException as exc:
        snapshot.restore()
        if isinstance(exc, SCHEME_ERRORS) and not isinstance(exc, ConfigError):
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise ConfigError(f"{scheme} init failed ({detail}); the model was left as it was") from exc
        raise
    return report


# what a scheme raises on values it cannot fit (a solver that does not converge, a shape it cannot take):
# a ConfigError for the caller, the original chained; KeyboardInterrupt and the like pass as they are
SCHEME_ERRORS = (TypeError, ValueError, AssertionError, RuntimeError, ArithmeticError, LookupError)


def complete_report(
    model: nn.Module, scheme: str, report: dict[str, Any], start: float, images: torch.Tensor | None
) -> dict[str, Any]:
    """The scheme's report with its name, the seconds taken and, for schemes that do not measure on
    the images themselves, the real-pass figures; a NaN or inf figure in it is a failure."""
    report["scheme"] = scheme
    report["seconds"] = time.perf_counter() - start
    reason = no_attention_left(model)
    if reason is not None:  # the schemes that run on such a model (random, scaled-position) say so
        report["no_attention_left"] = (
            f"{reason}: {scheme} init fitted and measured none (no real-pass figures)"
        )
    elif images is not None and "real_pass" not in report:
        real = untargeted_real_pass(model, images)
        if real is not None:
            report["real_pass"] = real
    check_finite_report(report, scheme)
    return report


__all__ = ["InitSpec", "check_scheme_applies", "init_spec", "initialize", "list_schemes", "register_scheme"]
