"""Publishing a folder others will read (an exported model): all of it or none of it, readable by all.

The files are written into a hidden temporary sibling, each fsynced and made world-readable (0644,
folders 0755: a shared model folder must not be private to its writer), then renamed into place. A
process killed midway leaves the previous folder, or nothing, plus a hidden `.NAME.*.tmp` to delete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from safetensors import SafetensorError

from convinit.errors import ConfigError
from convinit.runs.atomic import fsync_dir  # flushes a file, or a folder's entries

FILE_MODE = 0o644
FOLDER_MODE = 0o755


def writable_folder(target: Path, kept: Iterable[str] = ()) -> None:
    """One-line ConfigError unless `target` can become a folder here: not a file, under a writable
    folder, and empty or holding nothing but names in `kept` (an earlier export, to be replaced)."""
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} is a file, not a folder; pass a folder path")
    if target.is_dir():
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
    writable_folder(target, kept)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror or exc}; pass another folder") from exc
    old = None
    try:
        write(tmp)
        for path in tmp.iterdir():
            path.chmod(FILE_MODE)
            fsync_dir(path)
        tmp.chmod(FOLDER_MODE)
        fsync_dir(tmp)
        if target.is_dir() and any(target.iterdir()):  # set the earlier export aside, put it back on failure
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / target.name)
        try:
            os.replace(tmp, target)
        except OSError:
            if old is not None:
                os.replace(old / target.name, target)
            raise
        fsync_dir(target.parent)
    except (OSError, SafetensorError) as exc:  # safetensors reports a full disk as its own error
        detail = getattr(exc, "strerror", None) or " ".join(str(exc).split())[:200]
        kept = f"the earlier {target.name} is unchanged" if target.is_dir() else "nothing was written"
        raise ConfigError(
            f"cannot write {target} ({detail}); {kept}: free space on the disk or check its permissions, "
            "then run again"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target
