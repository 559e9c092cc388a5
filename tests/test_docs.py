"""Every fenced bash and python block in README.md and docs/*.md runs, on small real data, and succeeds.

Each page runs in its own workspace, blocks in order, holding what the docs name: `photos/` (a
class-per-folder set of Fashion-MNIST PNGs), `fashion-small/` (a `datasets` dataset saved with
save_to_disk), `shoe.png` and `coat.jpg`; a page that continues a run it does not start gets it from
PAGE_SETUP. Bash blocks run with `convinit` served by tests/docs/command_server.py (forked from one
process that imported torch once) after tests/docs/command_client.py shrinks the command (one epoch on
4 images per class, one seed, 5 % of the data per grid run, two data fractions, Fashion-MNIST read
from a 1,000 / 300-image copy of its IDX files); a `for` loop runs its first item. Python blocks run
as written, with `batch` (and `images`) defined: 64 real images (64, 3, 32, 32), normalised.

A block or command line that cannot run here is named in EXCLUDED with the reason; the line is replaced
by an `echo` of that reason, and every entry must still match something in the docs (a stale entry fails).
A new block on any page is picked up without touching this file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FASHION_DIR

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS_TESTS = Path(__file__).resolve().parent / "docs"

# substring of a command line (bash) or of a block (python) -> why it is not run here
EXCLUDED = {
    "pip install": "the environment under test is installed already; CI runs the set-up commands",
    "convinit demo": "tests/experiments/test_demo.py runs the demo (every method, 1 epoch)",
    "--push-to-hub": "uploads to the Hugging Face Hub: needs the network and a token",
    "--launcher slurm": "needs a SLURM cluster; tests/experiments/test_slurm_launcher.py runs it on one",
    "scripts/slurm-up": "starts SLURM's daemons as root; .ci/run starts them before the suite",
    "benchmarks/gpu.sh": "needs a GPU",
    "--compile both": "torch.compile takes about 40 s per model on a CPU; tests/speed covers the option",
    "python -m pytest -m slow": "the 10-minute soak test; it is marked slow",
    "submit_train(": "submits a SLURM job; tests/reliability/test_slurm_requeue.py runs it on a real SLURM",
    "python benchmarks/own_models.py": "a benchmark that takes minutes; the page shows its output",
    "python benchmarks/bias_diagnostics.py": "measures each trained run of the grid above",
    "python benchmarks/init_quality.py": "fits and measures every model of its table: minutes",
    "python benchmarks/kill_chains.py": "many minutes; tests/reliability runs short chains",
    "python benchmarks/users_vit_speed.py": "alternated timing rounds, minutes; "
    "tests/speed/test_users_vit.py"
    " builds and steps its rows",
    "python benchmarks/demo_time.py": "runs the whole quick demo, minutes; tests/experiments/test_demo.py "
    "runs the demo itself",
    "--out results/": "a claim grid of docs/results.md (hours of CPU); its runs are kept in results/ and "
    "tests/experiments/test_results_page.py checks the page against them",
    "convinit results": "reads the repository's results/ folder; test_results_page.py runs it",
}
# page -> commands run in its workspace first, for blocks that continue what another page starts
PAGE_SETUP = {
    "docs/reliability.md": "convinit train --out runs/wide --no-progress\n",
    # the paper-1 page analyses the alpha 0.5 grid, of which its loops run only the first row here
    "docs/paper1.md": "".join(
        f"convinit train --config paper1/table3_alpha_small {args} model_args.alpha=0.5 eval_every=20 "
        "track=[init_quality] dataset=fashion-mnist per_class=100 model_args.patch_size=4 --no-progress "
        f"--out runs/paper1/fashion/alpha0.5/{row}/seed0\n"
        for row, args in (("random", "init=random"), ("impulse-convinit-fit", "init=impulse"))
    ),
}
FENCE = re.compile(r"^(\s*)```(bash|python)\s*$")
LOOP = re.compile(r"\bfor\s+(\w+)\s+in\s+(.+?);\s*do\b")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced bash and python blocks, dedented to their fence."""
    found, lines = [], page.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        index += 1
        if not opening:
            continue
        indent, body, start = len(opening.group(1)), [], index
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index][indent:])
            index += 1
        index += 1
        found.append(Block(page, start, opening.group(2), "\n".join(body) + "\n"))
    return found


def excluded_reason(text: str) -> str | None:
    return next((reason for key, reason in EXCLUDED.items() if key in text), None)


def runnable_bash(code: str) -> str:
    """Continuations joined, loops cut to their first item, excluded lines replaced by their reason."""
    code = code.replace("\\\n", " ")
    code = LOOP.sub(lambda m: f"for {m[1]} in {shlex.quote(shlex.split(m[2])[0])}; do", code)
    out = []
    for line in code.splitlines():
        reason = excluded_reason(line)
        out.append(f"echo {shlex.quote(f'doc-test: not run ({reason})')} >&2" if reason else line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="session")
def command_server(tmp_path_factory):
    """A `convinit` on PATH whose calls are forked from one warm process (see tests/docs)."""
    folder = Path(tempfile.mkdtemp(prefix="convinit-doc-"))  # short: a socket path has ~100 bytes
    socket_path = folder / "server.sock"
    server = subprocess.Popen(
        [sys.executable, str(DOCS_TESTS / "command_server.py"), str(socket_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout.readline().strip() == "ready"
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "convinit"
    client = DOCS_TESTS / "command_client.py"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {client} {socket_path} "$@"\n')
    shim.chmod(0o755)
    yield bin_dir
    server.kill()
    server.wait()


@pytest.fixture(scope="session")
def doc_data(tmp_path_factory):
    """The files the docs name, made from real Fashion-MNIST images, and a small copy of its IDX files."""
    import torch
    from PIL import Image

    from convinit.data import load_dataset

    if not FASHION_DIR.is_dir():
        pytest.skip("the doc pages use Fashion-MNIST (apt-get install dataset-fashion-mnist)")
    root = tmp_path_factory.mktemp("doc-data")
    fashion = load_dataset("fashion-mnist")
    images, labels = fashion.test_images[:, 0].numpy(), fashion.test_labels.numpy()
    for name, label in (("shoe", 7), ("coat", 4), ("bag", 8)):  # Sneaker, Coat, Bag
        (root / "photos" / name).mkdir(parents=True)
        for count, index in enumerate((labels == label).nonzero()[0][:20]):
            Image.fromarray(images[index]).save(root / "photos" / name / f"{count:04d}.png")
    Image.fromarray(images[(labels == 7).argmax()]).save(root / "shoe.png")
    Image.fromarray(images[(labels == 4).argmax()]).convert("RGB").save(root / "coat.jpg")
    save_hf_dataset(fashion, root / "fashion-small")
    small_fashion = tmp_path_factory.mktemp("fashion-1k")
    for split, stem, count in (("train", "train", 1000), ("test", "t10k", 300)):
        write_idx(small_fashion / f"{stem}-images-idx3-ubyte", getattr(fashion, f"{split}_images")[:count, 0])
        write_idx(small_fashion / f"{stem}-labels-idx1-ubyte", getattr(fashion, f"{split}_labels")[:count])
    # what a snippet may leave to the reader: `batch` (= `images`), 64 real images (64, 3, 32, 32), normalised
    x = fashion.test_images[:64].float().div(255)
    x = torch.nn.functional.interpolate(x, size=32, mode="bilinear").expand(-1, 3, -1, -1)
    batch = ((x - x.mean()) / x.std()).contiguous()
    return root, small_fashion, batch


def write_idx(path: Path, values) -> None:
    """uint8 values in the IDX format (a big-endian header of type and shape, then the bytes)."""
    import numpy as np

    array = values.numpy().astype(np.uint8)
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    path.write_bytes(header + array.tobytes())


def save_hf_dataset(fashion, folder: Path, per_split: dict | None = None) -> None:
    """200 training and 100 test images of Fashion-MNIST in the `datasets` format, as save_to_disk writes."""
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=fashion.classes)}
    )
    splits = {}
    for split, count in (per_split or {"train": 200, "test": 100}).items():
        images, labels = getattr(fashion, f"{split}_images"), getattr(fashion, f"{split}_labels")
        rows = {
            "image": [Image.fromarray(image[0].numpy()) for image in images[:count]],
            "label": labels[:count].tolist(),
        }
        splits[split] = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict(splits).save_to_disk(str(folder))


def run_bash(code: str, cwd: Path, bin_dir: Path, where: str, fashion_dir: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "MPLBACKEND": "Agg",
        "CONVINIT_DOC_TEST_FASHION_MNIST": str(fashion_dir),  # see command_server.run_request
    }
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, (
        f"{where} exited {result.returncode}:\n{code}\n--- stdout\n{result.stdout[-3000:]}"
        f"\n--- stderr\n{result.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_block_of_the_page_runs(page, doc_data, command_server, tmp_path, monkeypatch):
    data, fashion_dir, batch = doc_data
    workspace = tmp_path / "workspace"
    shutil.copytree(data, workspace)
    monkeypatch.chdir(workspace)
    name = str(page.relative_to(ROOT))
    if name in PAGE_SETUP:
        run_bash(PAGE_SETUP[name], workspace, command_server, f"PAGE_SETUP[{name!r}]", fashion_dir)
    for block in blocks(page):
        start = time.perf_counter()
        if block.language == "bash":
            run_bash(runnable_bash(block.code), workspace, command_server, block.where, fashion_dir)
        elif excluded_reason(block.code) is None:
            namespace = {"__name__": "__doc_test__", "batch": batch, "images": batch}
            exec(compile(block.code, block.where, "exec"), namespace)
        print(f"{block.where}: {time.perf_counter() - start:.1f} s")  # pytest -s: where the time goes


def test_every_exclusion_matches_a_documented_block_and_gives_a_reason():
    text = "".join(block.code for page in PAGES for block in blocks(page))
    for key, reason in EXCLUDED.items():
        assert key in text, f"EXCLUDED[{key!r}] matches no block any more: remove it"
        assert len(reason.split()) >= 3, f"EXCLUDED[{key!r}] needs a reason"


def test_loops_run_their_first_item_and_excluded_lines_say_why():
    code = 'for init in "init=random x" "init=impulse"; do\n  pip install -e .\ndone\n'
    assert runnable_bash(code).splitlines() == [
        "for init in 'init=random x'; do",
        "echo 'doc-test: not run (the environment under test is installed already; CI runs the set-up "
        "commands)' >&2",
        "done",
    ]
