"""A user's own ViT (`model=timm:NAME`, `model=hf:vit`) goes all the way, like convinit's own models:
trained with step-0 tracking, evaluated, analysed (attention maps from the model's own attention at
initialisation and after training), exported (loadable by convinit and, for timm, by timm), predicted
with, and pushed (offline, against a stand-in Hub)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import convinit
from convinit.cli import main
from convinit.share.export import export_run
from tests.share.stand_in_hub import stand_in_hub

timm = pytest.importorskip("timm")
pytest.importorskip("transformers")

RUN = ["epochs=1", "per_class=5", "batch_size=10", "device=cpu", "warmup_epochs=0", "eval_every=0"]
MODELS = {
    "timm": ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=2", "model_args.embed_dim=24",
             "model_args.depth=2", "model_args.num_heads=2", "init=impulse"],
    "hf": ["model=hf:vit", "model_args.patch_size=2", "model_args.hidden_size=24",
           "model_args.num_hidden_layers=2", "model_args.num_attention_heads=2",
           "model_args.intermediate_size=48", "init=mimetic"],
    # both papers' architectures put into them (convinit.convert), with an init on what stays attention
    "timm, convert=gpsa": ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=2",
                           "model_args.embed_dim=24", "model_args.depth=2", "model_args.num_heads=4",
                           "convert=gpsa", "convert_args.layers=1", "init=impulse"],
    "hf, convert=blend": ["model=hf:vit", "model_args.patch_size=2", "model_args.hidden_size=24",
                          "model_args.num_hidden_layers=2", "model_args.num_attention_heads=2",
                          "model_args.intermediate_size=48", "convert=blend",
                          "convert_args.content_projection=true", "init=impulse"],
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """{family: (run directory, exported folder)}: one epoch on digits, tracked from step 0."""
    root = tmp_path_factory.mktemp("own")
    out = {}
    for family, args in MODELS.items():
        name = family.replace(", ", "-").replace("=", "-")
        run, folder = root / f"run-{name}", root / f"model-{name}"
        argv = ["train", *RUN, *args, "track=[init_quality]", "--out", str(run), "--no-progress"]
        assert main(argv) == 0
        assert main(["export", str(run), str(folder)]) == 0
        out[family] = run, folder
    return out


@pytest.mark.parametrize("family", MODELS)
def test_an_export_loads_back_with_the_runs_logits(runs, family):
    run, folder = runs[family]
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    loaded, trained = convinit.from_pretrained(folder), export_run(run)
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(loaded(x), trained(x))
    assert loaded.pretrained_config["classes"] == [str(i) for i in range(10)]


def test_timm_loads_the_export_of_a_timm_run_as_the_card_says(runs):
    _, folder = runs["timm"]
    config = json.loads((folder / "config.json").read_text())
    overlay = dict(file=str(folder / "model.safetensors"), num_classes=10)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=True, pretrained_cfg_overlay=overlay,
                              **config["model_args"]).eval()  # fmt: skip
    x = torch.randn(2, 1, 8, 8)
    assert torch.equal(model(x), convinit.from_pretrained(folder)(x))
    assert (
        'pretrained_cfg_overlay=dict(file="model.safetensors", num_classes=10)'
        in (folder / "README.md").read_text()
    )


@pytest.mark.parametrize("family", MODELS)
def test_eval_and_predict_work_from_the_run_and_from_the_export(runs, family, tmp_path, capsys):
    run, folder = runs[family]
    image = tmp_path / "seven.png"
    Image.fromarray((torch.rand(8, 8) * 255).byte().numpy()).save(image)
    assert main(["eval", str(run)]) == 0
    assert main(["predict", str(folder), str(image)]) == 0
    assert main(["predict", str(run), str(image)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == lines[-2] and lines[-1].startswith(f"{image}: ")


@pytest.mark.parametrize("family", MODELS)
def test_analyze_draws_the_models_own_attention_at_init_and_after_training(runs, family):
    from convinit.experiments.attention_figures import analyze_run

    run, _ = runs[family]
    lines = analyze_run(run)
    assert not any("no attention layers" in line for line in lines)
    for moment in ("init", "trained"):
        assert (run / "analysis" / f"attention-{moment}.png").stat().st_size > 0


@pytest.mark.parametrize("family", MODELS)
def test_step_0_is_tracked_when_eval_every_is_0(runs, family):
    run, _ = runs[family]
    rows = [json.loads(line) for line in (run / "track.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and "init_quality/entropy" in rows[0]


@pytest.mark.parametrize("family", MODELS)
def test_a_run_is_pushed_as_its_exported_folder(runs, family, tmp_path, monkeypatch):
    run, _ = runs[family]
    pushed = stand_in_hub(monkeypatch)
    assert main(["export", str(run), str(tmp_path / "m"), "--push-to-hub", "someone/pushed"]) == 0
    assert pushed["repo"] == "someone/pushed"
    assert pushed["files"] == {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}


@pytest.mark.parametrize("family", ["timm, convert=gpsa", "hf, convert=blend"])
def test_a_converted_models_card_records_the_conversion_and_how_to_load_it(runs, family):
    _, folder = runs[family]
    card, config = (folder / "README.md").read_text(), json.loads((folder / "config.json").read_text())
    kind = config["convert"]["kind"]
    assert f"| conversion | {kind}" in card and "convinit.from_pretrained" in card
    assert "timm.create_model" not in card  # timm alone cannot build the converted layers
    assert convinit.from_pretrained(folder).conversion == config["convert"]


def test_the_gates_of_a_gpsa_conversion_are_tracked(runs):
    run, _ = runs["timm, convert=gpsa"]
    argv = ["train", *RUN, *MODELS["timm, convert=gpsa"], "track=[gates]", "--out", str(run.parent / "gates")]
    assert main([*argv, "--no-progress"]) == 0
    rows = [json.loads(line) for line in (run.parent / "gates" / "track.jsonl").read_text().splitlines()]
    assert {f"gate/L0/H{h}" for h in range(4)} <= set(rows[0]) and "gate/L1/H0" not in rows[0]
