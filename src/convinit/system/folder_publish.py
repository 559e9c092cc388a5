"""Publishing a folder others will read (an exported model): all of it or none of it, readable by all.

The files are written into a hidden temporary sibling `.NAME.pidPID-XXXXXXXX.tmp`, each fsynced and made
world-readable (0644, folders 0755: a shared model folder must not be private to its writer), then put in
place in one step. Over an earlier export that step is an exchange of the two folders (Linux's
`renameat2(RENAME_EXCHANGE)`), so at every instant NAME is the earlier export or the new one, whenever the
process is killed. Where the file system cannot exchange, the earlier export is renamed aside to
`.NAME.pidPID-XXXXXXXX.old/NAME` first: a kill between the two renames leaves NAME missing for a moment,
and the next export of NAME puts the earlier one back before it starts. Each export removes what killed
exports of NAME left (hidden `.tmp` and `.old` folders of processes no longer running).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from safetensors import SafetensorError

from convinit.errors import ConfigError
from convinit.system.atomic import (  # fsync_dir flushes a file or a folder
    fsync_dir,
    process_running,
    refuse_link,
)

FILE_MODE = 0o644
FOLDER_MODE = 0o755
AT_FDCWD, RENAME_EXCHANGE = -100, 2  # from <fcntl.h> and <linux/fs.h>


def writable_folder(target: Path, kept: Iterable[str] = ()) -> None:
    """One-line ConfigError unless `target` can become a folder here: not a file, under a writable
    folder, and empty or holding nothing but names in `kept` (an earlier export, to be replaced)."""
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} is a file, not a folder; pass a folder path")
    if target.is_dir():
        for name in kept:  # an entry convinit replaces or writes into: never a link (`refuse_link`)
            refuse_link(target / name)
        others = sorted(p.name for p in target.iterdir() if p.name not in set(kept))
        if others:
            raise ConfigError(
                f"{target} already holds other files ({', '.join(others[:3])}); pass a new folder"
            )
    parent = target.parent
    for above in (parent, *parent.parents):
        if above.exists():
            if not above.is_dir():
                raise ConfigError(f"{target} lies under {above}, which is a file; pass a folder path")
            try:  # a real probe: os.access says yes to root on a read-only file system
                os.rmdir(tempfile.mkdtemp(prefix=".convinit-probe-", dir=above))
            except OSError as exc:
                raise ConfigError(
                    f"cannot write under {above} ({exc.strerror or exc}); pass a folder you can write to"
                ) from exc
            return


def publish_folder(target: Path, write: Callable[[Path], None], kept: Iterable[str] = ()) -> Path:
    """Make `target` a folder holding what `write(tmp)` writes, replacing an earlier one atomically.

    An existing `target` is replaced only if it is empty or holds nothing but names in `kept` (an
    earlier export): a folder with other files is refused rather than deleted.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        recover_leftovers(target)  # first: a killed export's earlier folder is put back, then judged
        writable_folder(target, kept)
        prefix = f".{target.name}.pid{os.getpid()}-"
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror or exc}; pass another folder") from exc
    try:
        write(tmp)
        for path in tmp.iterdir():
            path.chmod(FILE_MODE)
            fsync_dir(path)
        tmp.chmod(FOLDER_MODE)
        fsync_dir(tmp)
        put_in_place(tmp, target)
        fsync_dir(target.parent)
    except (OSError, SafetensorError) as exc:  # safetensors reports a full disk as its own error
        detail = getattr(exc, "strerror", None) or " ".join(str(exc).split())[:200]
        kept = f"the earlier {target.name} is unchanged" if target.is_dir() else "nothing was written"
        raise ConfigError(
            f"cannot write {target} ({detail}); {kept}: free space on the disk or check its permissions, "
            "then run again"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # after an exchange it holds the earlier export
    return target


def put_in_place(tmp: Path, target: Path) -> None:
    """`tmp` becomes `target`: renamed over a missing or empty one, exchanged with an earlier export (which
    `tmp` then names), or, where the file system cannot exchange, after the earlier one is set aside."""
    if not (target.is_dir() and any(target.iterdir())):
        os.replace(tmp, target)
        return
    if exchange(tmp, target):
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.pid{os.getpid()}-", suffix=".old", dir=target.parent))
    os.replace(target, old / target.name)
    try:
        os.replace(tmp, target)
    except OSError:
        os.replace(old / target.name, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux `renameat2` with RENAME_EXCHANGE); False where the system or the
    file system cannot (macOS, an older kernel, some network file systems)."""
    rename = getattr(libc(), "renameat2", None)
    if rename is None:
        return False
    if rename(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def leftovers(target: Path) -> list[Path]:
    """The hidden `.tmp` / `.old` folders that killed exports of `target` left beside it (not those of a
    process still running: another export of it may be writing)."""
    pattern = re.compile(re.escape(f".{target.name}.") + r"(?:pid(\d+)-)?[a-z0-9_]{8}\.(?:tmp|old)")
    found = []
    for path in sorted(target.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if match and path.is_dir() and not (match[1] and process_running(int(match[1]))):
            found.append(path)
    return found


def recover_leftovers(target: Path) -> None:
    """What killed exports of `target` left: an earlier export set aside while `target` is missing is
    put back; every other leftover is removed."""
    for path in leftovers(target):
        if path.name.endswith(".old") and (path / target.name).is_dir() and not target.exists():
            os.replace(path / target.name, target)
        shutil.rmtree(path, ignore_errors=True)
