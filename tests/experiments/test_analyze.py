"""`convinit analyze RUN`: says what it can analyse for any run and writes the attention maps it can."""

from __future__ import annotations

from convinit.cli import main
from convinit.config import build_config, resolve_config, save_config
from convinit.train import train

PNG = b"\x89PNG\r\n\x1a\n"


def test_analyze_of_a_vit_run_writes_its_attention_maps_and_says_what_was_not_tracked(
    tmp_path, tiny_overrides, capsys
):
    run = train(resolve_config(None, tiny_overrides + ["epochs=1"]), run_dir=tmp_path / "vit", progress=False)
    assert main(["analyze", str(run.run_dir)]) == 0
    out = capsys.readouterr().out
    init, trained = (
        run.run_dir / "analysis" / "attention-init.png",
        run.run_dir / "analysis" / "attention-trained.png",
    )
    assert (
        f"attention maps at initialisation: {init}" in out
        and f"attention maps after training: {trained}" in out
    )
    assert init.read_bytes()[:8] == PNG and trained.read_bytes()[:8] == PNG
    assert "non-locality over training: not recorded (train with track=nonlocality" in out
    assert "GPSA gates over training: none (simplevit has no gated positional attention)" in out


def test_analyze_of_a_model_without_attention_says_so(tmp_path, capsys):
    run_dir = tmp_path / "mixer"
    run_dir.mkdir()
    cfg = build_config({"model": "convmixer", "model_args": {"dim": 16, "depth": 1, "patch_size": 2}})
    save_config(cfg, run_dir / "config.yaml")
    assert main(["analyze", str(run_dir)]) == 0
    assert "attention maps: none (convmixer has no attention layers)" in capsys.readouterr().out


def test_analyze_of_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert main(["analyze", str(tmp_path)]) == 2
    assert "is not a run directory (no config.yaml)" in capsys.readouterr().err
