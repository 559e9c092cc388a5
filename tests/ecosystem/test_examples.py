"""The examples run top to bottom, so they never rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOK_EPOCHS = '"epochs=6"'  # the notebook's two training runs; the test trains each for one epoch


def test_teaching_notebook_runs_top_to_bottom(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "impulse_attention.ipynb", as_version=4)
    training = [cell for cell in notebook.cells if NOTEBOOK_EPOCHS in cell.source]
    assert len(training) == 1, f"the notebook's training cell lacks {NOTEBOOK_EPOCHS}: update this test"
    training[0].source = training[0].source.replace(NOTEBOOK_EPOCHS, '"epochs=1"')  # every cell runs, 1 epoch
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the figures were drawn
    assert (tmp_path / "notebook-runs" / "impulse" / "finished.json").exists()
    streams = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "step/s" in streams or "s/step" in streams  # the training progress bar, as text
    assert "IProgress" not in streams  # no ipywidgets warning where ipywidgets is not installed


def test_custom_model_example_initialises_a_timm_vit():
    pytest.importorskip("timm")
    command = [sys.executable, str(EXAMPLES / "custom_model.py")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "argmax agreement with the target convolution: 1.000" in result.stdout


JUPYTER_WITHOUT_IPYWIDGETS = """
import sys, types, warnings
import IPython
sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")  # what tqdm.auto looks for
sys.modules["ipywidgets"] = None  # `import ipywidgets` fails, as where it is not installed
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import convinit.train.trainer
    import tqdm.auto
print(tqdm.auto.tqdm.__module__, [str(w.message) for w in caught if "IProgress" in str(w.message)])
"""


def test_in_jupyter_without_ipywidgets_the_bar_is_text_and_nothing_warns():
    command = [sys.executable, "-c", JUPYTER_WITHOUT_IPYWIDGETS]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["tqdm.asyncio", "[]"]  # tqdm.auto's text bar (not tqdm.notebook)


@pytest.mark.slow  # two ViT-Ti fits and the transformers import in a subprocess: a minute, busy cores
def test_own_vit_example_initialises_timm_and_transformers_vits_on_real_images():
    pytest.importorskip("timm")
    pytest.importorskip("transformers")
    command = [sys.executable, str(EXAMPLES / "own_vit.py"), "--no-train"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["timm", "transformers"]
    for line in lines:  # "... 0.79 on the 42 images fitted on, 0.85 on 16 held apart ..."
        held = float(line.split(" held apart")[0].split(", ")[-1].split(" on ")[0])
        assert held >= 0.6, line
