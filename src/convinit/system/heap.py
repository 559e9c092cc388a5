"""Python's cycle collector kept off the objects a process already holds while it draws its figures."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Leave every object alive now out of the cycle collector's passes until the block ends.

    After torch's import and a few trained models a process holds ~400,000 objects, and each full pass
    of the collector walks them all (0.3-0.6 s on one core). Drawing figures allocates enough matplotlib
    objects to start five such passes in `convinit demo --quick`'s report, two seconds spent re-checking
    objects that were there before the first figure; frozen, a pass walks only what the block made.
    Objects made in the block are collected as usual; a freeze already in place is left as it was."""
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()
