"""What goes wrong around a trained run ends in one line (exit 2), and never costs what exists.

A push without a network is refused fast and keeps the local export; an export onto a full disk
leaves the earlier export whole; `--resume` refuses a run whose checkpoints all lost their manifests
instead of starting over; a model folder whose config.json is inconsistent or absurdly nested is
refused before any image is decoded.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from huggingface_hub import constants

from convinit.cli import main
from convinit.runs.checkpoint import MANIFEST, list_checkpoints


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convinit: error: "), err
    return err[0]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def refusing_endpoint():
    """A local address where nothing listens: connecting is refused at once, like an unplugged network."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_push_under_hf_hub_offline_is_refused_at_once_and_keeps_the_local_export(
    tmp_path, exact_reference, monkeypatch, capsys
):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "model"
    assert main(["export", str(exact_reference), str(out), "--push-to-hub", "me/model"]) == 2
    line = one_error_line(capsys)
    assert "HF_HUB_OFFLINE" in line and f"the export in {out} is kept" in line
    assert sorted(folder_bytes(out)) == ["README.md", "config.json", "model.safetensors"]


def test_push_to_an_unreachable_hub_fails_in_one_line_without_retrying_and_keeps_the_local_export(
    tmp_path, exact_reference, monkeypatch, capsys, refusing_endpoint
):
    from convinit.models.pretrained import PretrainedMixin

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", refusing_endpoint)
    monkeypatch.setattr(PretrainedMixin, "push_to_hub", lambda *a, **k: pytest.fail("uploaded unreachably"))
    out = tmp_path / "model"
    assert main(["export", str(exact_reference), str(out), "--push-to-hub", "me/model"]) == 2
    line = one_error_line(capsys)
    assert f"cannot reach {refusing_endpoint}" in line and f"the export in {out} is kept" in line
    assert (out / "model.safetensors").is_file()


def test_export_onto_a_full_disk_fails_in_one_line_and_leaves_the_earlier_export_whole(
    tmp_path, exact_reference, monkeypatch, capsys
):
    import safetensors.torch
    from safetensors import SafetensorError

    out = tmp_path / "model"
    assert main(["export", str(exact_reference), str(out)]) == 0
    earlier = folder_bytes(out)
    real_save = safetensors.torch.save_file

    def disk_fills_up(tensors, filename, *args, **kwargs):  # what safetensors does on ENOSPC
        real_save(tensors, filename, *args, **kwargs)
        Path(filename).write_bytes(Path(filename).read_bytes()[:1000])
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    capsys.readouterr()
    monkeypatch.setattr(safetensors.torch, "save_file", disk_fills_up)
    assert main(["export", str(exact_reference), str(out)]) == 2
    line = one_error_line(capsys)
    assert "No space left on device" in line and "the earlier model is unchanged" in line
    assert folder_bytes(out) == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "a temporary folder was left behind"


def test_resume_refuses_a_run_whose_checkpoints_all_lost_their_manifests(tmp_path, exact_reference, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(exact_reference, run_dir)
    (run_dir / "finished.json").unlink()  # an unfinished run: resumable in principle
    for checkpoint in list_checkpoints(run_dir):
        (checkpoint / MANIFEST).unlink()
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert "every checkpoint of" in line and "epoch-0003: no manifest" in line
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics, "the finished epochs were discarded"
    assert [p.name for p in list_checkpoints(run_dir)] == ["epoch-0002", "epoch-0003"]


@pytest.fixture(scope="module")
def digit_png(tmp_path_factory, digits) -> Path:
    from PIL import Image

    path = tmp_path_factory.mktemp("image") / "digit.png"
    Image.fromarray(digits.test_images[0, 0].numpy()).save(path)
    return path


@pytest.mark.parametrize("img_size", [1024, 4096])
def test_predict_refuses_a_config_whose_img_size_disagrees_with_the_model(
    tmp_path, exact_reference, digit_png, capsys, img_size
):
    out = tmp_path / "model"
    assert main(["export", str(exact_reference), str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    config["img_size"] = img_size
    (out / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["predict", str(out), str(digit_png)]) == 2
    line = one_error_line(capsys)
    assert f"img_size {img_size} disagrees with model_args.img_size [8, 8]" in line


@pytest.mark.parametrize("depth", [100, 200_000])  # under and over the interpreter's recursion limit
def test_a_deeply_nested_config_json_is_refused_in_one_line(
    tmp_path, exact_reference, digit_png, capsys, depth
):
    out = tmp_path / "model"
    assert main(["export", str(exact_reference), str(out)]) == 0
    text = (out / "config.json").read_text()
    (out / "config.json").write_text(text[:-1] + ', "notes": ' + "[" * depth + "]" * depth + "}")
    capsys.readouterr()
    assert main(["predict", str(out), str(digit_png)]) == 2
    assert "nested" in one_error_line(capsys)
