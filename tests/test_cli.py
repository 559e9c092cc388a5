"""The `convinit` command line: subcommands, help and one-line errors with exit code 2."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from convinit.cli import main


def test_train_from_the_command_line_writes_a_run(tmp_path, tiny_overrides, capsys):
    code = main(
        ["train", "--config", "default", *tiny_overrides, "--out", str(tmp_path / "run"), "--no-progress"]
    )
    assert code == 0
    assert "test accuracy" in capsys.readouterr().out
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    assert main(["eval", str(tmp_path / "run")]) == 0
    line = r"\(epoch 2\): test accuracy \d+\.\d\d%, test loss [0-9.e-]{1,8}\n"  # 2 decimals, 4 digits
    assert re.search(line, capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "dataset=nope"], "unknown dataset 'nope'"),
        (["train", "epoch=3"], "unknown config key 'epoch'; did you mean 'epochs'?"),
        (["train", "dataset=cifar10", "data_dir=/no/such/dir"], "/no/such/dir does not exist"),
        (["train", "--config", "nosuchpreset"], "unknown preset 'nosuchpreset'"),
        (["eval", "/no/such/run"], "is not a run directory"),
    ],
)
def test_bad_input_prints_one_line_and_exits_2(argv, message, capsys, tmp_path):
    assert main(argv + (["--out", str(tmp_path / "r")] if argv[0] == "train" else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and message in err
    assert err.count("\n") == 1


def test_listing_commands_name_the_registered_things(capsys):
    assert main(["models"]) == 0
    assert "simplevit" in capsys.readouterr().out.split()
    assert main(["datasets"]) == 0
    listing = capsys.readouterr().out
    assert "digits" in listing and "available" in listing
    assert main(["configs"]) == 0
    assert "default" in capsys.readouterr().out.split()


def test_console_entry_point_exits_2_on_bad_input():
    result = subprocess.run(
        [sys.executable, "-m", "convinit", "train", "dataset=nope"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("convinit: error: unknown dataset 'nope'")
    assert "Traceback" not in result.stderr


def test_help_describes_every_subcommand():
    result = subprocess.run([sys.executable, "-m", "convinit", "--help"], capture_output=True, text=True)
    for command in ("train", "eval", "datasets", "models", "configs"):
        assert command in result.stdout


def test_resume_with_a_changed_override_names_only_that_key(tmp_path, tiny_overrides, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_overrides, "epochs=1", "--out", str(run), "--no-progress"]) == 0
    assert main(["train", "--resume", str(run), "lr=0.5", "--no-progress"]) == 2
    assert "its saved config differs in lr;" in capsys.readouterr().err


def test_overrides_may_follow_options(tmp_path, tiny_overrides):
    argv = ["train", "--out", str(tmp_path / "run"), tiny_overrides[0], "--no-progress", *tiny_overrides[1:]]
    assert main(argv + ["epochs=1"]) == 0
    assert "epochs: 1" in (tmp_path / "run" / "config.yaml").read_text()
