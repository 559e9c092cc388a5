"""A mistyped local model path is refused at once in one line, never looked up on the Hub or in timm."""

from __future__ import annotations

import re
import sys

import pytest

from convinit.errors import ConfigError
from convinit.models.external import build_model_by_name
from convinit.models.pretrained import from_pretrained


@pytest.fixture
def no_hub(monkeypatch):
    """Any Hub lookup fails the test (offline, one retries for about half a minute)."""

    def hub_lookup(*args, **kwargs):
        raise AssertionError("looked up on the Hub")

    monkeypatch.setattr("huggingface_hub.hf_hub_download", hub_lookup)


def test_a_missing_folder_beside_existing_ones_is_refused_with_the_close_name(tmp_path, monkeypatch, no_hub):
    (tmp_path / "models" / "photos").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # `models/photo` reads as user/name too: the folder models/ says otherwise
    with pytest.raises(ConfigError, match=r"models/photo: no such folder \(did you mean models/photos\?\)"):
        from_pretrained("models/photo")


@pytest.mark.parametrize("name", ["./nonexistent", "runs/photos", "~/vit", "..\\vit"])
def test_a_path_as_a_timm_model_name_is_refused_before_timm_is_imported(name, monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # reaching `import timm` would say "needs timm"
    with pytest.raises(ConfigError, match=rf"model timm:{re.escape(name)} is a path, not a timm model name"):
        build_model_by_name(f"timm:{name}", num_classes=10, img_size=8, in_chans=1)
