"""The Hub round trip a user makes, offline: train on a `datasets` dataset, export with a model card,
push, load by folder and by name from the Hub cache, predict, and get the run's accuracy back."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_model

import convinit
from convinit.cli import main
from convinit.config import load_config, resolve_config
from convinit.data import load_dataset
from convinit.runs.checkpoint import list_checkpoints
from convinit.runs.metrics import MetricsLog
from convinit.share.export import export_run
from convinit.train import train
from tests.share.stand_in_hub import stand_in_hub

datasets = pytest.importorskip("datasets")
hub_constants = pytest.importorskip("huggingface_hub.constants")

NAMES = [f"digit{i}" for i in range(10)]
TINY = ["model_args.patch_size=2", "model_args.depth=2", "model_args.dim=32", "model_args.heads=2",
        "model_args.dim_head=16", "model_args.mlp_dim=64", "warmup_epochs=0", "device=cpu",
        "batch_size=100", "lr=3e-3", "deterministic=true"]  # fmt: skip


def digits_split(digits, split: str, count: int):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})
    images = [Image.fromarray(x[0].numpy()) for x in getattr(digits, f"{split}_images")[:count]]
    labels = getattr(digits, f"{split}_labels")[:count].tolist()
    return datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)


@pytest.fixture(scope="module")
def hf_digits(tmp_path_factory, digits) -> Path:
    path = tmp_path_factory.mktemp("hf") / "digits"
    splits = datasets.DatasetDict(
        train=digits_split(digits, "train", 300), test=digits_split(digits, "test", 200)
    )
    splits.save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, hf_digits) -> tuple[Path, Path]:
    """(run directory, exported model folder) of 8 epochs on the saved dataset, with a 150-image subset."""
    root = tmp_path_factory.mktemp("round_trip")
    overrides = [
        "dataset=hf",
        f"data_dir={hf_digits}",
        "per_class=15",
        "seed=7",
        *TINY,
        "epochs=8",
        "batch_size=25",
    ]
    assert main(["train", *overrides, "--out", str(root / "run"), "--no-progress"]) == 0
    assert main(["export", str(root / "run"), str(root / "model")]) == 0
    return root / "run", root / "model"


def card_table(card: str) -> dict[str, str]:
    rows = [line.strip("|").split("|", 1) for line in card.splitlines() if line.startswith("| ")]
    return {key.strip(): value.strip() for key, value in rows if key.strip() != "field"}


def test_a_saved_hf_dataset_trains_and_resumes_to_the_same_weights(tmp_path, hf_digits):
    overrides = ["dataset=hf", f"data_dir={hf_digits}", "epochs=2", *TINY]
    reference = train(resolve_config(None, overrides), run_dir=tmp_path / "reference", progress=False)
    shutil.copytree(tmp_path / "reference", tmp_path / "resumed")  # then rewind it to its epoch-1 checkpoint
    *earlier, newest = list_checkpoints(tmp_path / "resumed")
    shutil.rmtree(newest)
    (tmp_path / "resumed" / "finished.json").unlink()
    assert [c.name for c in earlier] == ["epoch-0001"]
    resumed = train(run_dir=tmp_path / "resumed", resume=True, progress=False)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    assert resumed.metrics[-1]["test_acc"] == reference.metrics[-1]["test_acc"]


def test_an_imagefolder_built_dataset_trains_for_an_epoch(tmp_path, digits):
    for i in range(60):
        split, index = ("train", i) if i < 40 else ("test", i - 40)
        label = int(getattr(digits, f"{split}_labels")[index])
        folder = tmp_path / "pictures" / split / NAMES[label]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(getattr(digits, f"{split}_images")[index, 0].numpy()).save(folder / f"{index}.png")
    overrides = ["dataset=hf", "hf_name=imagefolder", f"data_dir={tmp_path / 'pictures'}", "epochs=1", *TINY]
    assert main(["train", *overrides, "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert MetricsLog(tmp_path / "run").rows()[-1]["epoch"] == 1


def test_the_model_card_states_the_run_and_a_command_that_resolves_to_its_config(trained, hf_digits):
    run, model = trained
    card = (model / "README.md").read_text()
    fields = card_table(card)
    cfg = load_config(run / "config.yaml")
    final = MetricsLog(run).rows()[-1]
    assert fields["model"] == cfg.model == "simplevit"
    assert json.loads(fields["model_args"]) == cfg.model_args
    assert fields["dataset"] == f"hf data_dir={hf_digits}"
    assert fields["training images"] == "150 (15 per class)" and fields["test images"] == "200"
    assert fields["test accuracy"] == f"{final['test_acc']:.2f}%" and fields["epoch"] == "8 of 8"
    assert fields["seed"] == "7" and fields["convinit"] == convinit.__version__
    assert fields["init"] == cfg.init == "impulse" and "lr=0.003" in fields["recipe"]  # own_data's init
    assert fields["commit"].split()[0] not in ("", "unknown") or fields["commit"].startswith("unknown")
    command = card.split("## Reproduce", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    words = shlex.split(command)
    assert words[:2] == ["convinit", "train"] and words[-2:] == ["--out", "run"]
    assert resolve_config(None, words[2:-2]) == cfg


def test_from_pretrained_gives_the_runs_logits_and_test_accuracy(trained, hf_digits):
    run, folder = trained
    model = convinit.from_pretrained(folder)
    x = torch.randn(5, 1, 8, 8)
    assert torch.equal(model(x), export_run(run)(x))
    # the README's `convinit eval`-equivalent code
    data = load_dataset("hf", hf_digits)
    config = model.pretrained_config
    mean = torch.tensor(config["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(config["std"]).view(1, -1, 1, 1)
    with torch.no_grad():
        predicted = model((data.test_images.float() / 255 - mean) / std).argmax(dim=1)
    accuracy = 100.0 * (predicted == data.test_labels).float().mean().item()
    assert accuracy == pytest.approx(MetricsLog(run).rows()[-1]["test_acc"], abs=1e-4)
    assert accuracy > 20.0  # it learned: chance is 10 %


def hub_cache_copy(folder: Path, repo_id: str) -> Path:
    """Put `folder` in the Hub cache as the `main` revision of model repo `repo_id`, as a download would."""
    repo = Path(hub_constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return repo


def test_a_hub_name_loads_from_the_cache_offline_and_predicts(trained, tmp_path, digits, capsys):
    _, folder = trained
    assert hub_constants.HF_HUB_OFFLINE  # the suite never reaches the network
    hub_cache_copy(folder, "someone/tiny-digits")
    by_name = convinit.from_pretrained("someone/tiny-digits")
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(by_name(x), convinit.from_pretrained(folder)(x))
    image = tmp_path / "seven.png"
    Image.fromarray(digits.test_images[0, 0].numpy()).save(image)
    assert main(["predict", "someone/tiny-digits", str(image), "--top", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{image}: digit") and line.count("digit") == 2


def test_a_hub_name_missing_from_the_cache_is_one_line(tmp_path, capsys):
    Image.new("L", (8, 8)).save(tmp_path / "x.png")
    assert main(["predict", "someone/not-downloaded", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error:") and err.count("\n") == 1 and "HF_HUB_OFFLINE" in err


def test_folders_written_by_the_earlier_export_still_load(tmp_path):
    torch.manual_seed(0)
    args = dict(img_size=8, in_chans=1, patch_size=2, dim=16, depth=1, heads=2, dim_head=8, mlp_dim=16)
    model = convinit.create_model("simplevit", num_classes=3, **args).eval()
    old = tmp_path / "old"  # config.json with indent=1 and model.safetensors, no model card
    old.mkdir()
    config = {"model": "simplevit", "model_args": {**args, "num_classes": 3}, "classes": ["a", "b", "c"],
              "mean": [0.5], "std": [0.25], "dataset": "digits", "img_size": 8}  # fmt: skip
    (old / "config.json").write_text(json.dumps(config, indent=1))
    save_model(model, str(old / "model.safetensors"))
    loaded = convinit.from_pretrained(old)
    x = torch.randn(2, 1, 8, 8)
    assert torch.equal(loaded(x), model(x)) and loaded.pretrained_config["classes"] == ["a", "b", "c"]


def test_push_to_hub_uploads_the_exported_folder_with_its_card(trained, tmp_path, monkeypatch, capsys):
    run, folder = trained
    pushed = stand_in_hub(monkeypatch)
    assert main(["export", str(run), str(tmp_path / "m"), "--push-to-hub", "someone/pushed"]) == 0
    assert pushed["repo"] == "someone/pushed"
    assert pushed["files"] == {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    assert set(pushed["files"]) == {"config.json", "model.safetensors", "README.md"}


def test_push_to_hub_with_a_bad_name_is_refused_before_any_work(trained, tmp_path, capsys):
    run, _ = trained
    assert main(["export", str(run), str(tmp_path / "m"), "--push-to-hub", "not a/repo/name"]) == 2
    assert "user/name" in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_timm_loads_an_exported_model_through_pretrained_cfg_overlay(trained):
    timm = pytest.importorskip("timm")
    _, folder = trained
    model = timm.create_model(
        "convinit_simplevit", pretrained=True, pretrained_cfg_overlay=dict(file=str(folder))
    )
    x = torch.randn(2, 1, 8, 8)
    assert torch.equal(model(x), convinit.from_pretrained(folder)(x))
    with pytest.raises(ValueError, match="convinit_convmixer"):
        timm.create_model(
            "convinit_convmixer", pretrained=True, pretrained_cfg_overlay=dict(file=str(folder))
        )
