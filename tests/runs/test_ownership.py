"""A run directory keeps one writer when its `.owner.lock` is deleted: the owner's lock on the directory
itself refuses a newcomer, and where directories cannot be locked the owner stops before writing beside
a newcomer. Two real processes, synchronised on events, never on timing. Nothing in a run directory is
written through a link it holds (a folder received from someone else may point anywhere)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.runs import ownership
from convinit.runs.checkpoint import list_checkpoints, prune, save_checkpoint
from convinit.runs.metrics import MetricsLog
from convinit.runs.ownership import OWNER_LOCK, READERS_LOCK, own_run_dir, reading_checkpoints

FORK = multiprocessing.get_context("fork")
WAIT = 60  # seconds: a bound on a hung child, never a pause the test relies on


def hold(run_dir, ready, release, outcome) -> None:
    """In a child: take `run_dir`, say whether it could, and hold it until released."""
    try:
        with own_run_dir(run_dir):
            outcome.put("owner")
            ready.set()
            release.wait(WAIT)
    except ConfigError as exc:
        outcome.put(str(exc))
        ready.set()


def start_holder(run_dir):
    ready, release, outcome = FORK.Event(), FORK.Event(), FORK.Queue()
    child = FORK.Process(target=hold, args=(run_dir, ready, release, outcome))
    child.start()
    assert ready.wait(WAIT), "the child never reported"
    return child, release, outcome.get(timeout=WAIT)


def test_a_deleted_lock_file_does_not_let_a_second_writer_in(tmp_path):
    run_dir = tmp_path / "run"
    child, release, outcome = start_holder(run_dir)
    try:
        assert outcome == "owner"
        (run_dir / OWNER_LOCK).unlink()
        with pytest.raises(ConfigError, match=f"{run_dir} is in use by"):
            with own_run_dir(run_dir):
                pass
    finally:
        release.set()
        child.join(WAIT)
    with own_run_dir(run_dir):  # free again once the owner has gone
        pass


@pytest.fixture
def directories_unlockable(monkeypatch):
    """As on a file system that cannot lock directories: only the lock file guards the run."""
    lock = ownership.lock_exclusively

    def file_only(fd, run_dir, directory=False):
        return False if directory else lock(fd, run_dir)

    monkeypatch.setattr(ownership, "lock_exclusively", file_only)


def test_without_a_directory_lock_the_owner_stops_before_writing_beside_a_newcomer(
    tmp_path, directories_unlockable
):
    run_dir = tmp_path / "run"
    with own_run_dir(run_dir):
        MetricsLog(run_dir).append({"epoch": 0, "test_acc": 10.0})  # its lock intact: it writes
        (run_dir / OWNER_LOCK).unlink()
        child, release, outcome = start_holder(run_dir)  # the newcomer locks a fresh lock file
        try:
            assert outcome == "owner"
            with pytest.raises(ConfigError, match=f"{run_dir / OWNER_LOCK} was deleted or replaced"):
                MetricsLog(run_dir).append({"epoch": 1, "test_acc": 20.0})
            with pytest.raises(ConfigError, match="was deleted or replaced"):
                save_checkpoint(run_dir, nn.Linear(2, 2), {}, epoch=1)
        finally:
            release.set()
            child.join(WAIT)
    assert [row["epoch"] for row in MetricsLog(run_dir).rows()] == [0]
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())


def test_an_owner_whose_directory_was_replaced_stops_before_writing_into_the_new_one(tmp_path):
    run_dir = tmp_path / "run"
    with own_run_dir(run_dir):
        run_dir.rename(tmp_path / "moved")
        run_dir.mkdir()  # a fresh folder under the old name, which a newcomer could lock
        with pytest.raises(ConfigError, match=f"{run_dir} was deleted or replaced"):
            MetricsLog(run_dir).append({"epoch": 1, "test_acc": 20.0})
    assert not (run_dir / "metrics.jsonl").exists()


def test_an_owner_that_holds_its_directory_keeps_writing_when_only_the_lock_file_is_deleted(tmp_path):
    run_dir = tmp_path / "run"
    with own_run_dir(run_dir):
        (run_dir / OWNER_LOCK).unlink()  # nobody else can get in: the directory is still locked
        MetricsLog(run_dir).append({"epoch": 1, "test_acc": 20.0})
    assert [row["epoch"] for row in MetricsLog(run_dir).rows()] == [1]


def test_a_symlinked_owner_lock_is_refused_and_the_file_it_points_to_is_unchanged(tmp_path):
    notes, run_dir = tmp_path / "notes.txt", tmp_path / "run"
    notes.write_text("my notes\n")
    run_dir.mkdir()
    (run_dir / OWNER_LOCK).symlink_to(notes)  # a run folder received from someone else
    with pytest.raises(ConfigError, match=rf"{run_dir / OWNER_LOCK} is a symbolic link .*delete the link"):
        with own_run_dir(run_dir):
            pass
    assert notes.read_text() == "my notes\n"


def test_a_dangling_readers_lock_link_creates_nothing_where_it_points(tmp_path):
    run_dir, target = tmp_path / "run", tmp_path / "elsewhere.txt"
    run_dir.mkdir()
    (run_dir / READERS_LOCK).symlink_to(target)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        with reading_checkpoints(run_dir):
            pass
    assert not target.exists()


def test_a_metrics_row_is_never_appended_through_a_link(tmp_path):
    notes, run_dir = tmp_path / "notes.txt", tmp_path / "run"
    notes.write_text("my notes\n")
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").symlink_to(notes)
    with pytest.raises(ConfigError, match="metrics.jsonl is a symbolic link"):
        MetricsLog(run_dir).append({"epoch": 0, "test_acc": 10.0})
    assert notes.read_text() == "my notes\n"


def test_checkpoints_are_never_written_or_pruned_through_a_linked_checkpoints_folder(tmp_path):
    other, run_dir = tmp_path / "other_run_checkpoints", tmp_path / "run"
    save_checkpoint(tmp_path / "other_run", nn.Linear(2, 2), {}, epoch=1)
    (tmp_path / "other_run" / "checkpoints").rename(other)
    run_dir.mkdir()
    (run_dir / "checkpoints").symlink_to(other)
    with pytest.raises(ConfigError, match="checkpoints is a symbolic link"):
        save_checkpoint(run_dir, nn.Linear(2, 2), {}, epoch=5)
    with pytest.raises(ConfigError, match="checkpoints is a symbolic link"):
        prune(run_dir, keep=0)  # what `--out --overwrite` does to the old run's checkpoints
    assert sorted(p.name for p in other.iterdir()) == ["epoch-0001"]


def test_a_link_named_like_a_checkpoint_is_not_a_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "other_run", nn.Linear(2, 2), {}, epoch=1)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "epoch-0009").symlink_to(tmp_path / "other_run" / "checkpoints" / "epoch-0001")
    assert list_checkpoints(run_dir) == []
    save_checkpoint(run_dir, nn.Linear(2, 2), {}, epoch=9)  # replaces the link, not what it points to
    assert not (run_dir / "checkpoints" / "epoch-0009").is_symlink()
    assert (tmp_path / "other_run" / "checkpoints" / "epoch-0001" / "manifest.json").is_file()
