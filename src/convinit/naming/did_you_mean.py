"""`did you mean ...?` for every name a user types: config keys, values, models, datasets, presets.

One helper so that every refusal suggests the same way: names that start with what was typed first
(`vit_tiny` -> `vit_tiny_patch2_32`), then difflib's close matches (`fashion_mnist` -> `fashion-mnist`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(typed: str, options: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` options a typo or a shortened name most likely meant, best first."""
    options = list(options)
    text = str(typed).lower()
    normalised = {o: o.lower().replace("_", "-") for o in options}
    prefixed = [o for o in options if o.lower().startswith(text) and o.lower() != text]
    same_but_separators = [o for o in options if normalised[o] == text.replace("_", "-")]
    similar = difflib.get_close_matches(text, options, n=n, cutoff=0.6)
    ranked = list(dict.fromkeys(same_but_separators + prefixed + similar))
    return ranked[:n]


def suggestion(typed: str, options: Iterable[str], listing: str = "", n: int = 3) -> str:
    """'; did you mean 'x'?' (or 'x', 'y' or 'z'), else `listing` (e.g. '; `convinit models` lists them')."""
    names = close_names(typed, options, n)
    if not names:
        return listing
    quoted = [repr(name) for name in names]
    joined = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"; did you mean {joined}?"
