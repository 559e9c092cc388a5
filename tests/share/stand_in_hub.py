"""A stand-in for the Hub: `push_to_hub` runs as if online, and what it uploads is kept, not sent."""

from __future__ import annotations

from pathlib import Path


def stand_in_hub(monkeypatch) -> dict:
    """Patch huggingface_hub so that a push uploads into the returned dict ({"repo", "files"})."""
    from huggingface_hub import HfApi

    pushed: dict = {}

    class Repo:
        repo_id = "someone/pushed"

    def upload_folder(self, *, repo_id, folder_path, **_):
        pushed["repo"] = repo_id
        pushed["files"] = {p.name: p.read_bytes() for p in Path(folder_path).iterdir()}

    monkeypatch.setattr(HfApi, "create_repo", lambda self, **_: Repo())
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # online, as far as push knows
    monkeypatch.setattr("convinit.share.export.reach", lambda *_: None)  # the Hub answers (nothing is sent)
    return pushed
