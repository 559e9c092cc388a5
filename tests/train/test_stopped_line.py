"""The `stopped:` line of an interrupted run: on a line of its own after the progress bar, and naming the
command that continues it (the demo's own command for a demo's runs)."""

from __future__ import annotations

import io
import signal
import sys

import pytest

from convinit.config import resolve_config
from convinit.data import MixupCutmix
from convinit.experiments.demo import run_demo
from convinit.runs.signals import RunInterrupted
from convinit.train import train


@pytest.fixture
def ctrl_c_at_step_three(monkeypatch):
    calls = {"n": 0}
    original = MixupCutmix.__call__

    def ctrl_c(self, images, labels):
        calls["n"] += 1
        if calls["n"] == 3:
            signal.raise_signal(signal.SIGINT)
        return original(self, images, labels)

    monkeypatch.setattr(MixupCutmix, "__call__", ctrl_c)


def test_the_stopped_line_stands_on_its_own_line_after_the_progress_bar(
    tmp_path, tiny_overrides, ctrl_c_at_step_three, monkeypatch
):
    terminal = io.StringIO()  # what a user sees: the bar (stderr) and the messages (stdout) interleaved
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", terminal)
    with pytest.raises(RunInterrupted):
        train(resolve_config(None, tiny_overrides), run_dir=tmp_path / "run", progress=True)
    text = terminal.getvalue()
    assert "step/s" in text or "it/s" in text or "step]" in text  # the bar was drawn
    before, line = text.rsplit("stopped: ", 1)
    assert before.endswith("\n"), repr(text[-300:])
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "epoch-0000-step-000003"
    assert line == f"checkpoint {checkpoint}; continue with `convinit train --resume {run}`\n"


def test_an_interrupted_demo_says_to_rerun_the_demo(tmp_path, ctrl_c_at_step_three, capsys):
    with pytest.raises(RunInterrupted):
        run_demo(tmp_path / "demo", quick=True, progress=False)
    out = capsys.readouterr().out
    assert f"rerun `convinit demo --out {tmp_path / 'demo'} --quick` to continue where it stopped" in out
    assert "--resume" not in out
