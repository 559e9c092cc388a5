"""The `convinit` command line: subcommands, help and one-line errors with exit code 2."""

from __future__ import annotations

import os
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
        (["train", "threads=100000"], "config key 'threads' must be at most 1024"),
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


LISTING_COMMANDS = [
    ["--help"], ["--version"], ["models"], ["configs"], ["datasets"], ["train", "--help"],
    ["reproduce", "--list"],
]  # fmt: skip


def test_listing_help_and_version_do_not_import_torch():
    """What makes them answer at once: no torch, no model or reader module that needs it."""
    script = (
        "import sys\nfrom convinit.cli import main\n"
        f"for argv in {LISTING_COMMANDS!r}:\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "heavy = sorted(m for m in ('torch', 'timm', 'transformers') if m in sys.modules)\n"
        "print('imported:', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "simplevit" in result.stdout and "digits" in result.stdout and "convit/small" in result.stdout
    assert "paper1-table6" in result.stdout  # reproduce --list
    assert result.stdout.strip().endswith("imported: []")


def test_version_names_the_package(capsys):
    from convinit import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"convinit {__version__}"


@pytest.mark.parametrize(
    "argv, overrides",
    [
        (["train", "--epochs", "3"], ["epochs=3"]),
        (["train", "--epochs=3", "--warmup-epochs", "0.5"], ["epochs=3", "warmup_epochs=0.5"]),
        (["train", "--model_args.dim", "64", "lr=1e-3"], ["model_args.dim=64", "lr=1e-3"]),
        (["train", "--compile", "epochs=2"], ["compile=true", "epochs=2"]),
        (["efficiency", "--method", "a=default", "--epochs", "2"], ["--method", "a=default", "epochs=2"]),
        (["train", "--teacher", "runs/lr=3e-3", "epochs=2"], ["teacher=runs/lr=3e-3", "epochs=2"]),
        (["train", "--", "epochs=2", "--lr"], ["--", "epochs=2", "--lr"]),
    ],
)
def test_key_options_are_synonyms_of_key_value_overrides(argv, overrides):
    from convinit.cli import build_parser, key_options_as_overrides

    assert key_options_as_overrides(argv, build_parser()) == [argv[0], *overrides]


def test_command_options_keep_their_meaning():
    from convinit.cli import build_parser, key_options_as_overrides

    argv = ["train", "--seed", "1", "--out", "runs/x", "--device", "cpu"]  # options, not keys
    assert key_options_as_overrides(argv, build_parser()) == argv


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--epoch", "3"], "unknown option --epoch; did you mean epochs=3?"),
        (["train", "--epochs"], "option --epochs needs a value; did you mean epochs=VALUE?"),
        (
            ["train", "dataset=fashion_mnist"],
            "unknown dataset 'fashion_mnist'; did you mean 'fashion-mnist'?",
        ),
        (["train", "model=vit_tiny"], "unknown model 'vit_tiny'; did you mean 'vit_tiny_patch2_32'"),
        (
            ["train", "optimizer=adamm"],
            "must be one of adam, adamw, sgd, got 'adamm'; did you mean 'adam' or",
        ),
    ],
)
def test_mistyped_keys_and_values_suggest_the_close_names(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and message in err
    assert err.count("\n") == 1


def test_datasets_takes_data_dir_as_train_does(tmp_path, capsys):
    assert main(["datasets", f"data_dir={tmp_path}"]) == 0
    assert f"folder          not found  {tmp_path}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "value, kind", [("123", "int"), ("[a]", "list"), ("true", "bool"), ("{a: 1}", "dict")]
)
def test_datasets_refuses_a_data_dir_that_is_not_a_path_in_one_line(value, kind, capsys):
    assert main(["datasets", f"data_dir={value}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("convinit: error: data_dir must be a folder path, got ")
    assert f"({kind})" in captured.err and captured.err.count("\n") == 1 and captured.out == ""


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--seed", "abc"], "convinit train: argument --seed: invalid int value: 'abc'"),
        (["report"], "convinit report: the following arguments are required: DIR"),
        (["nosuchcommand"], "argument COMMAND: invalid choice: 'nosuchcommand'"),
    ],
)
def test_a_usage_mistake_is_one_line_not_a_usage_block(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert err.startswith("convinit: error: ") and message in err and "usage:" not in err


def test_overrides_after_the_end_of_options_are_read_as_written(capsys, tmp_path):
    assert main(["train", "--out", str(tmp_path / "r"), "--", "epochs=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "convinit: error: config key 'epochs' must be at least 1, got 0"  # not `model=epochs=0`


def test_a_reader_that_left_ends_the_listing_quietly_as_a_pipe_does():
    """`convinit reproduce --list | head -1`: the pipe's reader is gone before convinit writes; exit 141
    (what SIGPIPE gives other tools), nothing on stderr, never the full-disk line."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to write_end now fails with EPIPE
    try:
        result = subprocess.run(
            [sys.executable, "-m", "convinit", "configs"], stdout=write_end, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


def test_an_init_kernel_larger_than_the_models_grid_is_refused_before_the_run_folder_exists(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "init=impulse", "init_args.kernel_size=1000001", "--out", str(out)]) == 2
    assert not out.exists()
    assert "init_args.kernel_size=1000001 is larger than the 4x4 token grid" in capsys.readouterr().err
