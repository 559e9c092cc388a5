"""Every user mistake ends `convinit train` with exit code 2 and one exact line, before any step.

One table row per mistake: the command line (built in a fresh temporary folder), and the exact
message after `convinit: error: `. Each row runs `convinit.cli.main` in-process and checks that
stderr is that one line and that no training step ran (no metrics.jsonl in the run folder); one row
also runs as a real `python -m convinit` process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from convinit.cli import main
from convinit.config import resolve_config, save_config
from convinit.models.registry import list_models, model_arguments

TINY = [
    "epochs=1",
    "warmup_epochs=0",
    "batch_size=100",
    "device=cpu",
    "model_args.dim=32",
    "model_args.depth=1",
]
FASHION_HOW = (
    "install it with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu), set data_dir=... to a "
    "folder with the four IDX files, or pass download=true"
)
IDX_FILES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file: magic (0, 0, 0x08 = ubyte, ndim), big-endian dims, then the bytes."""
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(bytes([0, 0, 8, array.ndim]) + dims + array.astype(np.uint8).tobytes())


def fashion_dir_with_truncated_train_images(tmp: Path) -> Path:
    root = tmp / "fashion"
    root.mkdir()
    for name in IDX_FILES:
        shape = (20, 28, 28) if "images" in name else (20,)
        write_idx(root / name, np.zeros(shape))
    images = root / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:5000])  # header promises 16 + 20*28*28 = 15696 bytes
    return root


def saved_run(tmp: Path, finished: bool) -> Path:
    """A run folder as `convinit train` leaves it before its first epoch (or after its last)."""
    run_dir = tmp / "old"
    run_dir.mkdir()
    # the default preset as is: `--resume DIR KEY=VALUE` compares the default preset plus the
    # overrides with the saved config, so only then do the differences name just the overridden keys
    save_config(resolve_config(None, []), run_dir / "config.yaml")
    if finished:
        (run_dir / "finished.json").write_text('{"epoch": 1}')
    return run_dir


def convit_config(tmp: Path) -> Path:
    path = tmp / "convit.yaml"
    path.write_text(
        "model: convit_tiny\n"
        "model_args: {patch_size: 2, embed_dim: 32, num_heads: 2, depth: 2, local_up_to_layer: 1}\n"
        "dataset: digits\nepochs: 1\ndevice: cpu\n"
    )
    return path


def needs_model_argument(model: str, argument: str):
    if model not in list_models():
        return pytest.mark.skip(reason=f"no model {model!r} is registered yet")
    if argument not in model_arguments(model):
        return pytest.mark.skip(reason=f"{model} does not accept {argument!r} yet")
    return ()


# id -> (argv after `train`, given the temporary folder and the run folder; the exact message)
ROWS = {
    "unknown-key": (
        lambda tmp, out: [*TINY, "epoch=3", "--out", out],
        lambda tmp, out: "unknown config key 'epoch'; did you mean 'epochs'?",
    ),
    "wrong-type": (
        lambda tmp, out: [*TINY, "epochs=three", "--out", out],
        lambda tmp, out: "config key 'epochs' must be an integer, got 'three' (str)",
    ),
    "patch-does-not-divide": (
        lambda tmp, out: [*TINY, "model_args.patch_size=3", "--out", out],
        lambda tmp, out: (
            "patch_size 3 does not divide the image size 8x8; pick a patch size that divides both sides "
            "(or set img_size)"
        ),
    ),
    "alpha-outside-unit-interval": (
        lambda tmp, out: [*TINY, "model_args.qk_input=blend", "model_args.alpha=1.5", "--out", out],
        lambda tmp, out: "alpha must be a number in [0, 1] (0 = Model II, 0.5 = Model I), got 1.5",
    ),
    "gpsa-local-init-non-square-heads": (
        lambda tmp, out: ["--config", str(convit_config(tmp)), "--out", out],
        lambda tmp, out: (
            "ConViT local init needs a square number of heads (1, 4, 9, 16, ...), got 2; "
            "pick a square num_heads or set use_local_init=False"
        ),
    ),
    "empty-data-dir": (
        lambda tmp, out: [*TINY, "dataset=fashion-mnist", f"data_dir={mkdir(tmp / 'empty')}", "--out", out],
        lambda tmp, out: (
            f"dataset 'fashion-mnist': {tmp / 'empty'} lacks "
            + ", ".join(f"{name}[.gz]" for name in IDX_FILES)
            + f"; {FASHION_HOW}"
        ),
    ),
    "missing-data-dir": (
        lambda tmp, out: [*TINY, "dataset=fashion-mnist", f"data_dir={tmp / 'nowhere'}", "--out", out],
        lambda tmp, out: f"dataset 'fashion-mnist': {tmp / 'nowhere'} does not exist; {FASHION_HOW}",
    ),
    "corrupt-dataset-file": (
        lambda tmp, out: [
            *TINY,
            "dataset=fashion-mnist",
            f"data_dir={fashion_dir_with_truncated_train_images(tmp)}",
            "--out",
            out,
        ],
        lambda tmp, out: (
            f"{tmp / 'fashion' / 'train-images-idx3-ubyte'} holds 5000 bytes but its header promises "
            "15696; re-download it"
        ),
    ),
    "resume-with-another-config": (
        lambda tmp, out: ["--resume", str(saved_run(tmp, finished=False)), "lr=0.5", "seed=3"],
        lambda tmp, out: f"--resume {tmp / 'old'}: its saved config differs in lr, seed; drop the overrides",
    ),
    "finished-run-without-overwrite": (
        lambda tmp, out: [*TINY, "--out", str(saved_run(tmp, finished=True))],
        lambda tmp, out: (
            f"{tmp / 'old'} already holds a finished run; choose another --out or pass --overwrite"
        ),
    ),
}
MARKS = {
    "alpha-outside-unit-interval": needs_model_argument("simplevit", "alpha"),
    "gpsa-local-init-non-square-heads": needs_model_argument("convit_tiny", "num_heads"),
}


def mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def no_step_ran(tmp: Path) -> bool:
    return not list(tmp.rglob("metrics.jsonl"))


@pytest.mark.parametrize("row", [pytest.param(row, id=row, marks=MARKS.get(row, ())) for row in ROWS])
def test_bad_input_exits_2_with_one_exact_line_before_any_step(tmp_path, capsys, row):
    argv, message = ROWS[row]
    out = str(tmp_path / "run")
    assert main(["train", *argv(tmp_path, out), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"convinit: error: {message(tmp_path, out)}\n"
    assert no_step_ran(tmp_path)


def test_bad_input_in_a_real_process_exits_2_with_one_line(tmp_path):
    argv, message = ROWS["corrupt-dataset-file"]
    out = str(tmp_path / "run")
    command = [sys.executable, "-m", "convinit", "train", *argv(tmp_path, out), "--no-progress"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr == f"convinit: error: {message(tmp_path, out)}\n"
    assert result.stdout == ""
    assert no_step_ran(tmp_path)
