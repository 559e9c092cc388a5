"""The thread count of a run: chosen deliberately (config key, OMP_NUM_THREADS, the recorded count on
resume, else the cores less one or a grid's share), printed beside the data path, recorded in the run."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from convinit.config import resolve_config
from convinit.data.cores import cgroup_cores
from convinit.data.streamed_loader import StreamingImages, StreamLoader
from convinit.errors import ConfigError
from convinit.train import evaluate_run, train
from convinit.train.process import CONCURRENT_RUNS_ENV, choose_threads, read_recorded


@pytest.fixture(autouse=True)
def torch_threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_threads_key_wins_over_omp_num_threads():
    choice = choose_threads(3, env={"OMP_NUM_THREADS": "1"}, cores=8)
    assert (choice.threads, choice.reason) == (3, "threads=3")


def test_omp_num_threads_is_honoured_when_the_user_set_it():
    assert choose_threads(None, env={"OMP_NUM_THREADS": "2"}, cores=8).threads == 2
    assert choose_threads(None, env={"OMP_NUM_THREADS": "4,2"}, cores=8).threads == 4  # nested levels
    assert choose_threads(None, env={"OMP_NUM_THREADS": "junk"}, cores=8).threads == 7  # not a count: ignored


def test_one_process_leaves_one_core_free_and_never_goes_below_one():
    assert choose_threads(None, env={}, cores=8).threads == 7
    assert choose_threads(None, env={}, cores=2).threads == 1
    assert choose_threads(None, env={}, cores=1).threads == 1
    assert "8 cores, one left free" in choose_threads(None, env={}, cores=8).line()


def test_a_grid_gives_each_run_an_equal_share_of_the_cores():
    assert choose_threads(None, env={CONCURRENT_RUNS_ENV: "4"}, cores=16).threads == 4
    assert choose_threads(None, env={CONCURRENT_RUNS_ENV: "3"}, cores=2).threads == 1


def test_data_workers_are_counted_against_the_main_process():
    choice = choose_threads(None, workers=3, env={}, cores=8)
    assert choice.threads == 4 and "less 3 data workers" in choice.reason
    assert choose_threads(None, workers=8, env={}, cores=8).threads == 1


def test_a_resume_uses_the_count_the_run_started_with_unless_omp_num_threads_says_otherwise():
    assert choose_threads(None, recorded=5, env={}, cores=2).threads == 5
    moved = choose_threads(None, recorded=5, env={"OMP_NUM_THREADS": "1"}, cores=2)
    assert moved.threads == 1 and "started with 5: not bit-identical" in moved.reason


def test_a_cgroup_cpu_quota_is_read_as_whole_cores(tmp_path):
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert cgroup_cores(limit) == 2
    limit.write_text("max 100000\n")
    assert cgroup_cores(limit) is None
    assert cgroup_cores(tmp_path / "absent") is None


def test_the_threads_key_must_be_a_positive_count():
    assert resolve_config(None, ["threads=2"]).threads == 2
    with pytest.raises(ConfigError, match="'threads' must be at least 1, got 0"):
        resolve_config(None, ["threads=0"])


def thread_count(image) -> torch.Tensor:
    """A transform whose output is the thread count of the process that decoded the image."""
    return torch.tensor([torch.get_num_threads()])


def test_data_workers_compute_with_one_thread_each():
    torch.set_num_threads(2)
    images = StreamingImages(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), [0, 1], thread_count, in_chans=1)
    counts, _labels = next(iter(StreamLoader(images, batch_size=2, num_workers=1)))
    assert counts.flatten().tolist() == [1, 1]


def test_a_run_prints_its_threads_beside_the_data_path_records_them_and_resumes_with_them(
    tmp_path, tiny_overrides, capsys, monkeypatch
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = resolve_config(None, tiny_overrides + ["epochs=1"])
    run = train(cfg, run_dir=tmp_path / "run")
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("data: "))
    assert line.endswith("; threads: 1 (OMP_NUM_THREADS=1)")
    assert read_recorded(run.run_dir) == 1 and torch.get_num_threads() == 1
    assert json.loads((run.run_dir / "threads.json").read_text())["reason"] == "OMP_NUM_THREADS=1"
    monkeypatch.delenv("OMP_NUM_THREADS")
    (run.run_dir / "finished.json").unlink()  # resume it: the recorded count, whatever the cores
    train(None, run_dir=run.run_dir, resume=True)
    assert "threads: 1 (as when this run started, for a bit-identical resume)" in capsys.readouterr().err
    torch.set_num_threads(2)
    evaluate_run(run.run_dir)  # `convinit eval` sums as the run did
    assert torch.get_num_threads() == 1


def test_grid_children_are_told_how_many_runs_share_the_machine(tmp_path, monkeypatch):
    from convinit.experiments import runner

    def report_environment(run_dir):  # each child writes what its thread choice would read
        code = f"import os; open({str(run_dir / 'runs')!r}, 'w').write(os.environ[{CONCURRENT_RUNS_ENV!r}])"
        return [sys.executable, "-c", code]

    monkeypatch.setattr(runner, "subprocess_command", report_environment)
    run_dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for run_dir in run_dirs:
        run_dir.mkdir()
    runner.run_in_subprocesses(run_dirs, jobs=3, stop=runner.GridStop())
    assert [(run_dir / "runs").read_text() for run_dir in run_dirs] == ["3", "3", "3"]


def test_a_streamed_run_counts_its_data_workers_against_its_threads(tmp_path, tiny_overrides, monkeypatch):
    from convinit.train.process import DistributedContext, usable_cores
    from convinit.train.run_builder import build_run
    from convinit.train.validation import validate

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(CONCURRENT_RUNS_ENV, raising=False)
    cfg = resolve_config(None, tiny_overrides + ["data_mode=stream", "workers=1"])
    run = build_run(validate(cfg), tmp_path / "run", False, False, DistributedContext())
    cores = usable_cores()
    expected = max(1, max(1, cores - 1) - 1) if cores > 1 else 1
    assert run.threads.threads == expected == torch.get_num_threads()
    assert "less 1 data workers" in run.threads.reason and read_recorded(run.run_dir) == expected


@pytest.mark.parametrize(
    "recorded", ['{"threads": 100000}', '{"threads": "abc"}', '{"threads": true}', "[1]", "{"]
)
def test_a_damaged_thread_record_is_not_used_and_is_named_in_one_warning(tmp_path, recorded):
    (tmp_path / "threads.json").write_text(recorded)
    with pytest.warns(UserWarning, match=r"threads\.json: field 'threads' must be an integer in 1\.\.1024"):
        assert read_recorded(tmp_path) is None


def test_local_ranks_under_torchrun_share_the_cores_equally():
    env = {"LOCAL_WORLD_SIZE": "8"}
    choice = choose_threads(None, env=env, cores=16)
    assert choice.threads == 2 and "16 cores, 8 local ranks" in choice.reason
    assert choose_threads(None, env={**env, CONCURRENT_RUNS_ENV: "2"}, cores=16).threads == 1
    assert choose_threads(None, workers=1, env={"LOCAL_WORLD_SIZE": "2"}, cores=16).threads == 7


def test_each_local_rank_starts_at_most_its_share_of_the_cores_as_decoding_workers():
    from convinit.data.cores import decoding_workers

    assert decoding_workers(16, env={"LOCAL_WORLD_SIZE": "8"}, cores=16) == 2
    assert decoding_workers(16, env={"LOCAL_WORLD_SIZE": "32"}, cores=16) == 1  # at least one
    assert decoding_workers(4, env={}, cores=16) == 4
    assert decoding_workers(0, env={"LOCAL_WORLD_SIZE": "8"}, cores=16) == 0


def test_the_streamed_loaders_take_the_ranks_share_of_workers(monkeypatch):
    from convinit.data import source

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setattr("convinit.data.cores.usable_cores", lambda: 8)
    cfg = resolve_config(None, ["workers=16"])
    images = StreamingImages(torch.zeros(4, 1, 8, 8, dtype=torch.uint8), [0, 1, 0, 1], lambda image: image)
    train_loader, test_loader = source.stream_loaders(cfg, images, images, 1, 4, torch.device("cpu"))
    assert train_loader.num_workers == test_loader.num_workers == 2


def test_every_rank_records_its_own_count_and_workers_and_reads_its_own_back(tmp_path):
    from convinit.train.process import ThreadChoice, record_threads

    record_threads(tmp_path, ThreadChoice(3, "main"), rank=0, workers=2)
    record_threads(tmp_path, ThreadChoice(1, "other"), rank=1, workers=2)
    assert json.loads((tmp_path / "threads-rank1.json").read_text()) == {
        "threads": 1, "reason": "other", "rank": 1, "workers": 2}  # fmt: skip
    assert (read_recorded(tmp_path), read_recorded(tmp_path, 1)) == (3, 1)
    assert read_recorded(tmp_path, 2) == 3  # a rank that recorded nothing: the run's own count
