"""Hostile and careless inputs to from_pretrained, predict and export: one line and exit 2 (a
ConfigError / DataError from Python), never a traceback, a half-loaded model or `nan` printed."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

import convinit
from convinit.cli import main
from convinit.errors import ConfigError, ConvinitError
from convinit.share.predict import predict

ARGS = dict(img_size=8, in_chans=1, patch_size=2, dim=16, depth=1, heads=2, dim_head=8, mlp_dim=16)


@pytest.fixture
def folder(tmp_path) -> Path:
    torch.manual_seed(0)
    model = convinit.create_model("simplevit", num_classes=3, **ARGS)
    return model.save_pretrained(tmp_path / "model", classes=["a", "b", "c"], mean=[0.5], std=[0.25])


def edit_config(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        change(config)
        (folder / "config.json").write_text(json.dumps(config))

    return apply


def write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes(data)


def other_weights(name: str, **kwargs) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        model = convinit.create_model(name, num_classes=3, **{"img_size": 8, "in_chans": 1, **kwargs})
        save_file(model.state_dict(), str(folder / "model.safetensors"))

    return apply


def weights_in_memory(folder: Path) -> dict[str, torch.Tensor]:
    """The weights copied out of the file (load_file maps it; rewriting a mapped file crashes)."""
    return {k: v.clone() for k, v in load_file(str(folder / "model.safetensors")).items()}


def pickle_renamed(folder: Path) -> None:
    torch.save(weights_in_memory(folder), folder / "model.safetensors")


def truncated(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def nan_weights(folder: Path) -> None:
    tensors = weights_in_memory(folder)
    next(t for t in tensors.values() if t.is_floating_point()).view(-1)[0] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"))


MALFORMED = {
    "no config.json": lambda f: (f / "config.json").unlink(),
    "config.json is a folder": lambda f: ((f / "config.json").unlink(), (f / "config.json").mkdir()),
    "config.json not JSON": write("config.json", b"{model: simplevit"),
    "config.json not UTF-8": write("config.json", b'{"model": "\xff\xfe"}'),
    "config.json a list": write("config.json", b"[1, 2]"),
    "missing model_args": edit_config(lambda c: c.pop("model_args")),
    "model_args not a mapping": edit_config(lambda c: c.update(model_args=[1])),
    "unknown model": edit_config(lambda c: c.update(model="resnet50")),
    "no model name": edit_config(lambda c: c.pop("model")),
    "img_size NaN": write("config.json", b'{"model": "simplevit", "model_args": {"img_size": NaN}}'),
    "absurd img_size": edit_config(lambda c: c["model_args"].update(img_size=10**9)),
    "negative img_size": edit_config(lambda c: c["model_args"].update(img_size=-8)),
    "img_size a string": edit_config(lambda c: c["model_args"].update(img_size="8")),
    "top-level img_size NaN": edit_config(lambda c: c.update(img_size=float("nan"))),
    "one class": edit_config(lambda c: c["model_args"].update(num_classes=1)),
    "too few class names": edit_config(lambda c: c.update(classes=["a", "b"])),
    "no in_chans": edit_config(lambda c: c["model_args"].pop("in_chans")),
    "absurd depth": edit_config(lambda c: c["model_args"].update(depth=100_000_000)),
    "absurd width": edit_config(lambda c: c["model_args"].update(dim=10_000_000)),
    "unknown model argument": edit_config(lambda c: c["model_args"].update(colour="red")),
    "impossible model argument": edit_config(lambda c: c["model_args"].update(patch_size=0)),
    "zero std": edit_config(lambda c: c.update(std=[0.0])),
    "std of three channels": edit_config(lambda c: c.update(std=[0.2, 0.2, 0.2])),
    "reserved key": edit_config(lambda c: c.update(token="x")),
    "wrong shapes": edit_config(lambda c: c["model_args"].update(dim=32, dim_head=16)),
    "another architecture's weights": other_weights(
        "convmixer", patch_size=1, dim=16, depth=1, kernel_size=3
    ),
    "another preset's weights": other_weights("simplevit", **{**ARGS, "depth": 2}),
    "pickle renamed model.safetensors": pickle_renamed,
    "truncated weights": truncated,
    "empty weights": write("model.safetensors", b""),
    "no weights": lambda f: (f / "model.safetensors").unlink(),
    "NaN in the weights": nan_weights,
}


@pytest.mark.parametrize("damage", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_model_folder_is_one_config_error(folder, damage):
    MALFORMED[damage](folder)
    with pytest.raises(ConfigError) as info:
        convinit.from_pretrained(folder)
    message = str(info.value)
    assert "\n" not in message and str(folder) in message, message


@pytest.mark.parametrize(
    "damage", ["config.json not JSON", "wrong shapes", "pickle renamed model.safetensors"]
)
def test_the_cli_reports_a_malformed_folder_in_one_line_with_exit_2(folder, damage, tmp_path, capsys):
    MALFORMED[damage](folder)
    Image.new("L", (8, 8)).save(tmp_path / "x.png")
    assert main(["predict", str(folder), str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and err.count("\n") == 1


def own_model_folder(kind: str, folder: Path) -> Path:
    """A tiny `timm:` or `hf:vit` model saved as `convinit export` saves one."""
    from convinit.models.external import build_model_by_name

    torch.manual_seed(0)
    shape = dict(num_classes=2, img_size=8, in_chans=1, patch_size=4)
    if kind == "timm":
        model = build_model_by_name("timm:vit_tiny_patch16_224", **shape, embed_dim=16, depth=1, num_heads=2)
    else:
        sizes = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
        model = build_model_by_name("hf:vit", **shape, **sizes)
    return convinit.save_pretrained(model, folder)


TAMPERED_EXPORTS = {  # a timm / transformers export's config.json edited: (kind, model_args change, field)
    "timm act_layer unknown": ("timm", {"act_layer": "bogus"}, "model_args.act_layer='bogus'"),
    "timm width a text": ("timm", {"embed_dim": "sixteen"}, "model_args.embed_dim='sixteen' is not a number"),
    "timm weights named": ("timm", {"pretrained": True}, "model_args.pretrained is not passed to the model"),
    "hf flash attention": ("hf", {"attn_implementation": "flash_attention_2"}, "attn_implementation"),
    "hf layers a text": (
        "hf",
        {"num_hidden_layers": "two"},
        "model_args.num_hidden_layers='two' is not a number",
    ),
    "hf activation unknown": ("hf", {"hidden_act": "bogus"}, "model_args.hidden_act='bogus'"),
}


@pytest.mark.parametrize("case", TAMPERED_EXPORTS)
def test_a_tampered_timm_or_transformers_export_is_one_line_naming_the_folder_and_field(tmp_path, case):
    kind, change, field = TAMPERED_EXPORTS[case]
    folder = own_model_folder(kind, tmp_path / "model")
    edit_config(lambda c: c["model_args"].update(change))(folder)
    with pytest.raises(ConfigError) as info:
        convinit.from_pretrained(folder)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{folder}: config.json is damaged: ")
    assert field in message and message.endswith("export the model again")


def test_predict_with_a_tampered_timm_export_exits_2_in_one_line(tmp_path, capsys):
    folder = own_model_folder("timm", tmp_path / "model")
    edit_config(lambda c: c["model_args"].update(act_layer="bogus"))(folder)
    Image.new("L", (8, 8)).save(tmp_path / "x.png")
    assert main(["predict", str(folder), str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"convinit: error: {folder}: config.json is damaged") and err.count("\n") == 1


def test_a_missing_path_that_is_no_hub_name_says_so(tmp_path):
    with pytest.raises(ConfigError, match="not a model folder nor a Hub name"):
        convinit.from_pretrained(tmp_path / "no" / "such" / "folder")


def bomb(path: Path) -> None:
    Image.new("L", (2000, 2000)).save(path)  # 4 Mpixels, a few kB of PNG


def truncated_png(path: Path) -> None:
    Image.new("L", (64, 64), 9).save(path)
    path.write_bytes(path.read_bytes()[:60])


BAD_IMAGES = {
    "a text file": (lambda p: p.write_text("not an image\n"), "cannot be decoded"),
    "a zero-byte PNG": (lambda p: p.write_bytes(b""), "cannot be decoded"),
    "a truncated PNG": (truncated_png, "cannot be decoded"),
    "a folder": (lambda p: p.mkdir(), "does not exist"),
    "a missing file": (lambda p: None, "does not exist"),
    "a decompression bomb": (bomb, "larger than PIL's limit"),
}


@pytest.mark.parametrize("case", BAD_IMAGES, ids=list(BAD_IMAGES))
def test_predict_refuses_a_bad_image_in_one_line(folder, tmp_path, case, monkeypatch, capsys):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)  # the bomb is 4x PIL's limit here
    make, message = BAD_IMAGES[case]
    make(tmp_path / "input.png")
    assert main(["predict", str(folder), str(tmp_path / "input.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and message in err and err.count("\n") == 1


def test_a_decompression_bomb_is_refused_from_its_header_without_decoding(folder, tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)
    bomb(tmp_path / "bomb.png")
    decoded = []
    monkeypatch.setattr(Image.Image, "load", lambda self, *args: decoded.append(self.size))
    with pytest.raises(ConvinitError, match="it was not decoded"):
        predict(folder, [tmp_path / "bomb.png"])
    assert decoded == []


def test_an_image_just_over_the_pixel_limit_is_refused_too(folder, tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3_000_000)  # PIL only warns between 1x and 2x its limit
    bomb(tmp_path / "big.png")
    with pytest.raises(ConvinitError, match="larger than PIL's limit"):
        predict(folder, [tmp_path / "big.png"])


@pytest.mark.parametrize("top", ["-1", "0"])
def test_predict_refuses_a_top_below_one(folder, tmp_path, top, capsys):
    Image.new("L", (8, 8)).save(tmp_path / "x.png")
    assert main(["predict", str(folder), str(tmp_path / "x.png"), "--top", top]) == 2
    assert "--top must be a positive number" in capsys.readouterr().err


def test_predict_refuses_non_finite_scores_instead_of_printing_nan(folder, tmp_path, capsys):
    tensors = weights_in_memory(folder)
    head = [k for k in tensors if k.endswith("bias") and tensors[k].shape == (3,)][-1]
    tensors[head] = torch.tensor([3e38, 3e38, -3e38])  # finite weights, infinite logits
    weight = head.replace("bias", "weight")
    tensors[weight] = torch.full_like(tensors[weight], 3e38)
    save_file(tensors, str(folder / "model.safetensors"))
    Image.new("L", (8, 8), 200).save(tmp_path / "x.png")
    assert main(["predict", str(folder), str(tmp_path / "x.png")]) == 2
    captured = capsys.readouterr()
    assert "nan" not in captured.out.lower() and "NaN or infinite scores" in captured.err


def test_exported_files_are_readable_by_others_whatever_the_umask(tmp_path):
    model = convinit.create_model("simplevit", num_classes=3, **ARGS)
    old = os.umask(0o077)
    try:
        folder = model.save_pretrained(tmp_path / "shared")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {
        "config.json": 0o644,
        "model.safetensors": 0o644,
        "README.md": 0o644,
    }


def test_a_failed_export_leaves_the_earlier_one_whole_and_no_temporary_folder(folder, monkeypatch):
    from huggingface_hub import PyTorchModelHubMixin

    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def disk_full(self, save_directory):
        (Path(save_directory) / "model.safetensors").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PyTorchModelHubMixin, "_save_pretrained", disk_full)
    model = convinit.create_model("simplevit", num_classes=3, **ARGS)
    with pytest.raises(ConfigError, match="No space left on device"):
        model.save_pretrained(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["model"]


def test_export_replaces_an_earlier_export_but_not_a_folder_of_other_files(folder, tmp_path):
    model = convinit.create_model("simplevit", num_classes=3, **ARGS)
    assert model.save_pretrained(folder) == folder  # an earlier export: replaced
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.tex").write_text("keep me")
    with pytest.raises(ConfigError, match="already holds other files"):
        model.save_pretrained(tmp_path / "notes")
    assert (tmp_path / "notes" / "thesis.tex").read_text() == "keep me"


def a_file(tmp_path: Path) -> Path:
    (tmp_path / "file.txt").write_text("x")
    return tmp_path / "file.txt"


def read_only_parent(tmp_path: Path) -> list[str]:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0o555)
    return [str(tmp_path / "locked" / "out")]


DESTINATIONS = {
    "a file": lambda tmp: [str(a_file(tmp))],
    "under a file": lambda tmp: [str(a_file(tmp) / "out")],
    "a read-only folder": read_only_parent,
    "a read-only file system": lambda tmp: ["/sys/convinit-out"],
}


@pytest.mark.parametrize("where", DESTINATIONS, ids=list(DESTINATIONS))
@pytest.mark.parametrize("command", ["export", "demo"])
def test_export_and_demo_refuse_an_unwritable_destination_in_one_line(tmp_path, where, command, capsys):
    if where == "a read-only folder" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    if where == "a read-only file system" and not Path("/sys").is_dir():
        pytest.skip("no /sys (sysfs) here")
    out = DESTINATIONS[where](tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("epochs: 1\n")
    argv = (
        ["export", str(tmp_path / "run"), *out] if command == "export" else ["demo", "--quick", "--out", *out]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("convinit: error: ") and err.count("\n") == 1
