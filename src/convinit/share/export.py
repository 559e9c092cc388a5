"""A trained run as a shareable model: its newest checkpoint, the data's classes and normalisation, and a
model card generated from the run (see `convinit.share.model_card`); optionally pushed to the Hub."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models.pretrained import FOLDER_FILES, is_repo_id, push_to_hub, save_pretrained
from convinit.share.model_card import run_model_card
from convinit.system.folder_publish import writable_folder
from convinit.train.opening import open_run, require_run_dir

CONNECT_TIMEOUT = 10  # seconds to reach the Hub before a push is given up
EXPORTED = ("classes", "mean", "std", "img_size", "preprocess")  # from the run's record into config.json


def export_run(
    run_dir: str | Path, out: str | Path | None = None, push_to_hub: str | None = None
) -> nn.Module:
    """A run's newest checkpoint as a model carrying `pretrained_config` and `model_card`.

    Saved to the folder `out` (written atomically) if given, and pushed to the Hub repository
    `push_to_hub` (`user/name`, with the token of `hf auth login`) if given.
    """
    run_dir = Path(run_dir)
    require_run_dir(run_dir)  # said before the destination is checked
    if out is not None:
        writable_folder(Path(out), FOLDER_FILES)  # before the data is read: a bad destination fails now
    if push_to_hub is not None and not is_repo_id(push_to_hub):
        raise ConfigError(f"--push-to-hub wants a Hub name user/name, got {push_to_hub!r}")
    run = open_run(run_dir, data=False)  # its record: what the run trained with, never recomputed
    cfg, record = run.cfg, run.record
    model = run.model.to(memory_format=torch.contiguous_format)  # a channels_last run's weights, saved plain
    metadata = {"dataset": cfg.dataset, **{k: record[k] for k in EXPORTED}}
    model.pretrained_config = {"model": cfg.model, **metadata}
    model.model_card = run_model_card(run_dir, cfg, record, run.epoch)
    if out is not None:
        save_pretrained(model, out)
    if push_to_hub is not None:
        push(model, push_to_hub, Path(out) if out is not None else None)
    return model.eval()


def push(model: nn.Module, repo_id: str, saved: Path | None) -> None:
    """Upload the model folder (weights, config, card) to the Hub. Without a network this fails in one
    line within `CONNECT_TIMEOUT` seconds (at once under HF_HUB_OFFLINE), naming the local export kept."""
    import httpx  # huggingface_hub's HTTP client
    from huggingface_hub import constants
    from huggingface_hub.utils import HfHubHTTPError  # here in every release from 0.23 on

    kept = (
        f"the export in {saved} is kept: push it later with `hf upload {repo_id} {saved}`"
        if saved
        else ("export to a folder first, then push it with `hf upload`")
    )
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(f"not pushed to {repo_id}: HF_HUB_OFFLINE is set, the Hub is not contacted; {kept}")
    reach(constants.ENDPOINT, repo_id, kept)
    try:
        push_to_hub(model, repo_id)
    except (HfHubHTTPError, httpx.TransportError, OSError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:300]
        login = "" if isinstance(exc, httpx.TransportError) else "; log in with `hf auth login`"
        raise ConfigError(
            f"could not push to {repo_id} ({type(exc).__name__}: {detail}){login}; {kept}"
        ) from exc


def reach(endpoint: str, repo_id: str, kept: str) -> None:
    """One TCP connection to the Hub's host within `CONNECT_TIMEOUT` seconds, or a one-line ConfigError
    (huggingface_hub retries a refused upload for minutes before it gives up)."""
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ConfigError(
            f"not pushed to {repo_id}: cannot reach {endpoint} ({exc.strerror or exc or 'timed out'}); "
            f"check the network; {kept}"
        ) from exc
