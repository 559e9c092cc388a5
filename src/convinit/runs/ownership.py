"""Who may write a run directory, and how readers keep a checkpoint from being pruned under them.

Two advisory locks (`fcntl.flock`), both released by the kernel when their process dies, so a SIGKILL
never leaves a stale lock behind:

- the run directory itself and `RUN_DIR/.owner.lock`, held exclusively for the whole of `train`,
  `--resume` and a grid's run: a second writer is refused at once with the holder's PID (written into
  the file). The lock on the directory is what survives `rm RUN_DIR/.owner.lock`: a newcomer would
  lock a fresh file, but it cannot make a fresh directory under the owner unseen: before each metrics
  row and checkpoint the owner checks that the path still names the directory it locked (and, where
  directories cannot be locked, as on some network file systems, that the lock file is still the one
  it locked), and stops if it does not.
- both lock files are opened without following a link (`O_NOFOLLOW`) and must be regular files: a run
  folder received from someone else may hold `.owner.lock -> ~/notes.txt`, which writing the PID would
  truncate; such a lock is refused in one line naming it.
- `RUN_DIR/.readers.lock`: readers (`eval`, `export`, `predict`, `teacher=`) hold it shared while they
  find, verify and load a checkpoint; the trainer takes it exclusively only to delete checkpoints, so
  pruning waits for a reader that is loading the checkpoint it would remove, and never the reverse.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from convinit.errors import ConfigError
from convinit.system.atomic import open_regular

OWNER_LOCK = ".owner.lock"
READERS_LOCK = ".readers.lock"
LOCK_FILES = (OWNER_LOCK, READERS_LOCK)
HELD_OWNER_LOCKS: set[int] = set()  # descriptors of the owner locks this process holds
OWNED: dict[str, tuple[int, int, bool]] = {}  # real path of an owned run dir: lock fd, dir fd, dir locked


def drop_inherited_owner_locks() -> None:
    """In a forked child (a DataLoader worker, which may outlive the run): close the parent's owner-lock
    descriptors, so that the run directory is free as soon as the run that owns it ends."""
    for fd in HELD_OWNER_LOCKS:
        os.close(fd)
    HELD_OWNER_LOCKS.clear()
    OWNED.clear()


os.register_at_fork(after_in_child=drop_inherited_owner_locks)


def lock_holder(run_dir: Path) -> str:
    """The PID recorded by the current owner ("an unknown process" until it has written it)."""
    try:
        fd = open_regular(run_dir / OWNER_LOCK, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            pid = f.read(32).decode("ascii", "replace").strip()
    except (OSError, ConfigError):
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"


@contextmanager
def own_run_dir(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir` exclusively while the block runs; ConfigError naming the holder if it is taken."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ConfigError(
            f"cannot write to run directory {run_dir} ({exc.strerror}); choose a writable --out"
        ) from exc
    fd = None
    try:
        try:
            fd = open_regular(run_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)  # a link: ConfigError
        except OSError as exc:
            raise ConfigError(
                f"cannot write to run directory {run_dir} ({exc.strerror}); choose a writable --out"
            ) from exc
        directory_locked = lock_exclusively(dir_fd, run_dir, directory=True)
        lock_exclusively(fd, run_dir)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        HELD_OWNER_LOCKS.update((fd, dir_fd))
        OWNED[os.path.realpath(run_dir)] = (fd, dir_fd, directory_locked)
        yield
    finally:
        OWNED.pop(os.path.realpath(run_dir), None)
        for held in (fd, dir_fd):
            if held is not None:
                HELD_OWNER_LOCKS.discard(held)
                os.close(held)  # closing releases the lock


def lock_exclusively(fd: int, run_dir: Path, directory: bool = False) -> bool:
    """flock `fd` without waiting; ConfigError naming the holder if another process has it. For the
    directory: False where its file system cannot lock directories (the lock file alone guards it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ConfigError(
            f"{run_dir} is in use by {lock_holder(run_dir)} (a convinit run training into it); "
            "wait for it to finish or stop it, then continue with --resume"
        ) from None
    except OSError:
        if not directory:
            raise
        return False
    return True


def check_still_owner(run_dir: Path) -> None:
    """Before writing a metrics row or a checkpoint: the locks this process took still guard `run_dir`.

    The path must still name the directory it locked (not one made in its place after `rm -r`); and
    where the directory could not be locked, `.owner.lock` must still be the file it locked, since a
    deleted or replaced one can have let a second writer in. Otherwise this run stops (ConfigError)
    rather than write beside another. A no-op for a directory this process does not own (a library
    caller writing without `own_run_dir`)."""
    held = OWNED.get(os.path.realpath(run_dir))
    if held is None:
        return
    lock_fd, dir_fd, directory_locked = held
    checks = [(Path(run_dir), dir_fd)] + ([] if directory_locked else [(Path(run_dir) / OWNER_LOCK, lock_fd)])
    for path, fd in checks:
        if not same_file(path, fd):
            raise ConfigError(
                f"{path} was deleted or replaced while this run held it, so another writer may have "
                "taken the run directory; stopped without writing: check that no other run trains "
                f"into {run_dir}, then continue with --resume"
            )


def same_file(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        on_disk = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def open_readers_lock(run_dir: Path) -> int | None:
    """A descriptor on the readers' lock file, created if possible; None on a read-only directory
    (which nobody can prune either)."""
    path = run_dir / READERS_LOCK
    try:
        return open_regular(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        try:
            return open_regular(path, os.O_RDONLY)
        except OSError:
            return None


@contextmanager
def readers_lock(run_dir: Path, exclusive: bool) -> Iterator[None]:
    fd = open_readers_lock(run_dir) if run_dir.is_dir() else None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def reading_checkpoints(run_dir: Path) -> AbstractContextManager[None]:
    """Hold while finding, verifying and loading a checkpoint of `run_dir`: no checkpoint is removed."""
    return readers_lock(Path(run_dir), exclusive=False)


def removing_checkpoints(run_dir: Path) -> AbstractContextManager[None]:
    """Hold while deleting checkpoints: waits for readers that are loading one."""
    return readers_lock(Path(run_dir), exclusive=True)
