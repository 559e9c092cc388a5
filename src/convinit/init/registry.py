"""The registry of init schemes: every module of `convinit.init.schemes` registers its scheme here.

The registry imports that package's modules the first time it is asked for a name, so a new scheme is
one new file in `init/schemes/` and nothing else names it; `convinit.init.initialize` looks it up.
What a scheme accepts is read from its signature (and, for a scheme that takes `**options`, from the
options dataclass it registers with), so `init_spec` can refuse an unknown scheme or option before a
run folder, its data or its model exist.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from convinit.errors import ConfigError
from convinit.naming.did_you_mean import suggestion
from convinit.naming.registry import Registry

Scheme = Callable[..., dict[str, Any]]  # (model, **options) -> report
SUPPLIED = ("model", "images")  # what `initialize` passes itself; never an option a user sets


def unknown_scheme(typed: str, names: list[str]) -> str:
    """The refusal of a scheme name: the closest names, then every scheme (there are few)."""
    hint, listing = suggestion(typed, names), f"choose one of: {', '.join(names)}"
    return (
        f"unknown init scheme {typed!r}{hint} ({listing})"
        if hint
        else f"unknown init scheme {typed!r}; {listing}"
    )


SCHEMES: Registry[Scheme] = Registry("init scheme", "convinit.init.schemes", unknown=unknown_scheme)


def register_scheme(
    name: str,
    options: type | None = None,
    check: Callable[[dict[str, Any]], None] | None = None,
    needs_attention: bool = False,
) -> Callable[[Scheme], Scheme]:
    """Decorator: register `fn(model, **options) -> report` as init scheme `name`. A scheme that takes
    `**options` names the dataclass that parses them (`options`), whose fields are then accepted too and
    whose construction checks their values; a scheme whose options are keyword parameters names the
    function that checks their values (`check`, given the options set). Either runs in `init_spec`,
    before any model, data or run folder exists; the types the annotations name are checked there too.

    `needs_attention`: the scheme acts on plain attention layers only, so on a model that has none left
    (`convinit.init.attention_sites.no_attention_left`) it would be `random` under another name and is
    refused (`convinit.init.check_scheme_applies`, before any work); a scheme without it runs there and
    its report says that no attention layer was left."""

    def decorate(fn: Scheme) -> Scheme:
        fn.options_type = options  # type: ignore[attr-defined]
        fn.check_options = check  # type: ignore[attr-defined]
        fn.needs_attention = needs_attention  # type: ignore[attr-defined]
        return SCHEMES.add(name, fn)

    return decorate


def list_schemes() -> list[str]:
    return SCHEMES.names()


def scheme_options(fn: Scheme) -> list[str]:
    """The option names scheme `fn` accepts: its keyword parameters and its options dataclass's fields."""
    names = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in SUPPLIED
    ]
    parsed = getattr(fn, "options_type", None)
    return names + ([f.name for f in dataclasses.fields(parsed)] if parsed is not None else [])


# what an annotation of an option admits, and how a refusal names it (other types: the scheme judges)
OPTION_TYPES: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
    type(None): (lambda v: v is None, "null"),
}


def option_annotations(fn: Scheme) -> dict[str, Any]:
    """Option name -> annotation, from the scheme's signature and its options dataclass (unresolvable
    annotations are left out: the scheme judges those values itself)."""
    found: dict[str, Any] = {}
    for source in (fn, getattr(fn, "options_type", None)):
        if source is None:
            continue
        try:
            found.update(typing.get_type_hints(source))
        except (NameError, TypeError):
            continue
    return {key: hint for key, hint in found.items() if key not in SUPPLIED and key != "return"}


def check_option_type(scheme: str, key: str, value: Any, annotation: Any) -> None:
    """One line for a value its annotation rules out: a boolean must be true or false (the text "no"
    is not false), a count an integer (true is not 1), a number finite (inf is no weight)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = typing.get_args(annotation) if union else (annotation,)
    if not kinds or any(kind not in OPTION_TYPES for kind in kinds):
        return
    if not any(OPTION_TYPES[kind][0](value) for kind in kinds):
        names = [OPTION_TYPES[kind][1] for kind in kinds]
        wanted = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)
        raise ConfigError(
            f"{scheme} init option {key} must be {wanted}, got {value!r} ({type(value).__name__})"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{scheme} init option {key} must be a finite number, got {value!r}")


@dataclass(frozen=True)
class InitSpec:
    """An init scheme and its options, checked against what the scheme accepts (`init_spec`)."""

    scheme: str
    options: dict[str, Any] = field(default_factory=dict, hash=False)

    def accepts(self, option: str) -> bool:
        return option in scheme_options(SCHEMES.get(self.scheme))


def init_spec(scheme: str, options: dict[str, Any] | None = None) -> InitSpec:
    """The spec of `scheme` with `options`; one-line ConfigError for an unknown scheme, an option it does
    not take (with the closest names), a value of a type its annotation rules out or not finite, or a
    value its options dataclass or check refuses. Builds no model."""
    if not isinstance(scheme, str):
        raise ConfigError(f"init must name a scheme ({', '.join(list_schemes())}), got {scheme!r}")
    fn = SCHEMES.get(scheme)  # unknown: a ConfigError naming the closest schemes
    options = dict(options or {})
    accepted = scheme_options(fn)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        hint = suggestion(unknown[0], accepted) if len(unknown) == 1 else ""
        listing = f"it accepts: {', '.join(accepted)}"
        listing = f" ({listing})" if hint else f"; {listing}"
        raise ConfigError(f"{scheme} init takes no option {', '.join(unknown)}{hint}{listing}")
    annotations = option_annotations(fn)
    for key, value in options.items():
        if key in annotations:
            check_option_type(scheme, key, value, annotations[key])
    seed = options.get("seed")
    if isinstance(seed, int) and not 0 <= seed < 2**63:  # every scheme's seed seeds a torch.Generator
        raise ConfigError(f"{scheme} init option seed must be in [0, 2**63), got {seed}")
    parsed = getattr(fn, "options_type", None)
    if parsed is not None:
        names = {f.name for f in dataclasses.fields(parsed)}
        parsed(**{key: value for key, value in options.items() if key in names})  # its own value checks
    check = getattr(fn, "check_options", None)
    if check is not None:
        check(options)
    return InitSpec(scheme, options)
