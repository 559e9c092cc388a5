"""Atomic file writes: write a temporary file beside the target, fsync it, rename it over the target.

A reader (or a process killed mid-write) then sees either the old file or the new one, never an empty
or half-written one. Every file convinit writes into a run directory or a report folder goes through
`atomic_write_bytes` / `atomic_write_text` (or `atomic_writer` for code that wants a file object).
Temporary names start with `.` and end with `.tmp`, so nothing mistakes them for results; one that a
killed writer left (its PID no longer running) is removed by the next write of the same file.

Nothing is written through a link: a run folder received from someone else may hold
`metrics.jsonl -> ~/notes.txt`. The rename puts a regular file in the link's place (the file it pointed to
is untouched), and every file opened for writing in place (a lock, an appended log) is opened with
`O_NOFOLLOW` and must be a regular file, or it is refused in one line naming it (`open_regular`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from convinit.errors import ConfigError

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


def process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # running, as another user
        return True
    return True


def remove_stale_temps(path: Path) -> None:
    """Remove the temporary files of `path` that writers killed mid-write left (their PID has ended)."""
    pattern = re.compile(re.escape(f".{path.name}.") + r"(\d+)" + re.escape(TEMP_SUFFIX))
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        found = pattern.fullmatch(name)
        if found and int(found[1]) != os.getpid() and not process_running(int(found[1])):
            try:
                os.unlink(path.parent / name)  # a link is removed, never followed
            except OSError:
                pass


def refuse_link(path: Path) -> None:
    """ConfigError if `path` is a symbolic link: a folder convinit writes into (or deletes in) must be
    the one named, not wherever a received run folder's link points."""
    if os.path.islink(path):
        raise ConfigError(
            f"{path} is a symbolic link (to {os.readlink(path)}); convinit does not write through links "
            f"in a run folder, since that would change what it points to: delete the link, then run again"
        )


def make_folder(path: str | Path, inside: str | Path) -> Path:
    """Create `path` and the folders between it and `inside` (an output folder the user named), refusing
    any of them that is a link: what convinit makes inside an output folder is that folder, never wherever
    a link in a folder received from someone else points (`refuse_link`)."""
    path, inside = Path(path), Path(inside)
    inside.mkdir(parents=True, exist_ok=True)
    current = inside
    for part in path.relative_to(inside).parts:
        current = current / part
        refuse_link(current)
        current.mkdir(exist_ok=True)
    return path


def open_regular(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """A descriptor on `path`, opened without following a link (`O_NOFOLLOW`, `O_NONBLOCK` so a FIFO never
    blocks); a link or anything but a regular file there is refused in one line naming it (ConfigError).
    OSError (a missing folder, no permission) is left to the caller."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a link; a FIFO without a reader; a folder
            refuse_link(path)
            raise ConfigError(f"{path} is not a regular file; delete it, then run again") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path} is not a regular file; delete it, then run again")
    return fd


def append_text(path: str | Path, text: str) -> None:
    """Append `text` to `path` (created if missing) without following a link (see `open_regular`)."""
    with open(path, "a", opener=open_regular) as f:
        f.write(text)


def create_afresh(path: str, flags: int) -> int:
    """`open`'s opener for a temporary file: created by this call, never an existing file or a link."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w", **open_args: Any) -> Iterator[IO]:
    """`with atomic_writer(p) as f: f.write(...)`: `p` appears complete on success, unchanged on failure.

    New files get the usual mode (0666 minus the umask); a replaced regular file keeps its permission
    bits. The temporary file is created afresh (`O_EXCL | O_NOFOLLOW`), so a link planted under its name
    is removed, never written through.
    """
    path = Path(path)
    tmp = temp_path(path)
    remove_stale_temps(path)
    try:
        tmp.unlink(missing_ok=True)  # this process's own leftover, or a link in its place
        with open(tmp, mode, opener=create_afresh, **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if path.is_file() and not path.is_symlink():
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
