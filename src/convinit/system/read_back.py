"""Reading a run's own files back (records, logs, configs) within a size limit.

A run folder can be edited by hand, damaged, or hold a link to something that is no file at all
(`metrics.jsonl -> /dev/zero` never ends): every file convinit reads back from it must be a regular
file no larger than its limit, or it is refused in one line naming it, before any byte is parsed.
"""

from __future__ import annotations

import os
import reprlib
import stat
from pathlib import Path
from typing import Any

from convinit.errors import ConfigError

RECORD_LIMIT = 16 << 20  # bytes: a JSON record or config.yaml; convinit's own are a few kilobytes
LOG_LIMIT = 256 << 20  # bytes: metrics.jsonl / track.jsonl; a row a step for a million steps fits

_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxdict = 4
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlevel = 2


def short_repr(value: Any) -> str:
    """A value in at most a few dozen characters, however long or deep (for one-line errors)."""
    return _SHORT.repr(value)


def read_capped(path: Path, limit: int = RECORD_LIMIT) -> bytes:
    """The bytes of `path`; ConfigError naming it if it is not a regular file or is over `limit` bytes.

    OSError (a missing or unreadable file) is left to the caller, which knows what its absence means.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: opening a FIFO would block
        raise ConfigError(
            f"{path} is not a regular file; restore the file convinit wrote there, or delete it"
        )
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(
            f"{path} is over {limit >> 20} MiB, far more than convinit writes there; it is damaged: "
            "restore or delete it"
        )
    return data
