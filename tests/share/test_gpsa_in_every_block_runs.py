"""A timm or transformers ViT converted to GPSA in every block (ConViT's ablation; the default conversion
of a depth-2 ViT) goes all the way: trained with init=random, whose init_report.json says no attention
layer was left to fit, resumed to the weights of an uninterrupted run, exported and loaded back with the
run's logits. impulse and mimetic, which would be random under another name there, exit 2 before the run
folder exists."""

from __future__ import annotations

import json

import pytest
import torch

import convinit
from convinit.cli import main
from convinit.config import resolve_config
from convinit.share.export import export_run
from convinit.train import train
from tests.train.test_trainer import interrupted_then_resumed

pytest.importorskip("timm")
pytest.importorskip("transformers")

MODELS = {
    "timm": ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=2", "model_args.embed_dim=16",
             "model_args.depth=2", "model_args.num_heads=4", "model_args.mlp_ratio=2"],
    "hf": ["model=hf:vit", "model_args.patch_size=2", "model_args.hidden_size=16",
           "model_args.num_hidden_layers=2", "model_args.num_attention_heads=4",
           "model_args.intermediate_size=32"],
}  # fmt: skip
# 2 epochs of 10 steps: what `interrupted_then_resumed` stops at step 5 of epoch 2
RUN = ["convert=gpsa", "init=random", "epochs=2", "per_class=10", "batch_size=10",
       "warmup_epochs=0", "eval_every=0", "deterministic=true", "device=cpu"]  # fmt: skip


@pytest.mark.parametrize("family", MODELS)
def test_a_vit_that_is_gpsa_in_every_block_trains_resumes_exports_and_loads_back(
    family, tmp_path, monkeypatch
):
    overrides = [*MODELS[family], *RUN]
    reference = train(resolve_config(None, overrides), run_dir=tmp_path / "reference", progress=False)
    report = json.loads((tmp_path / "reference" / "init_report.json").read_text())
    assert "no plain attention layer is left" in report["no_attention_left"] and "real_pass" not in report
    assert reference.model.conversion["layers"] == 2
    resumed = interrupted_then_resumed(resolve_config(None, overrides), tmp_path / "resumed", monkeypatch)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    folder = tmp_path / "exported"
    trained = export_run(tmp_path / "resumed", folder)
    loaded = convinit.from_pretrained(folder)
    x = torch.randn(3, 1, 8, 8)
    assert loaded.conversion == trained.conversion and torch.equal(loaded(x), trained(x))


@pytest.mark.parametrize("scheme", ["impulse", "mimetic"])
@pytest.mark.parametrize("family", MODELS)
def test_an_init_that_fits_attention_exits_2_before_the_run_folder_exists(family, scheme, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *MODELS[family], "convert=gpsa", f"init={scheme}", "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    assert not out.exists()
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{scheme} init acts on attention layers" in error and "convert_args.layers" in error
