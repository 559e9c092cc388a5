"""Atomic file writes: write a temporary file beside the target, fsync it, rename it over the target.

A reader (or a process killed mid-write) then sees either the old file or the new one, never an empty
or half-written one. Every file convinit writes into a run directory or a report folder goes through
`atomic_write_bytes` / `atomic_write_text` (or `atomic_writer` for code that wants a file object).
Temporary names start with `.` and end with `.tmp`, so nothing mistakes them for results.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".tmp"


def temp_path(path: Path) -> Path:
    """The hidden temporary name `path` is written under before the rename (unique per process)."""
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w", **open_args: Any) -> Iterator[IO]:
    """`with atomic_writer(p) as f: f.write(...)`: `p` appears complete on success, unchanged on failure.

    New files get the usual mode (0666 minus the umask); a replaced file keeps its permission bits.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace `path` with `data` atomically (write-temp, fsync, rename)."""
    with atomic_writer(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Replace `path` with `text` atomically (write-temp, fsync, rename)."""
    atomic_write_bytes(path, text.encode(encoding))
