"""huggingface_hub >= 0.23 is the floor pyproject.toml states: every name convinit takes from it must exist
there. Its error classes live in `huggingface_hub.utils` in every release from 0.23 on; the newer
`huggingface_hub.errors` lacks them in 0.23 and 0.24, so an import from there breaks the floor unseen by a CI
that installs the newest hub (docs/ecosystem.md, "transformers and huggingface_hub versions")."""

from __future__ import annotations

import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "convinit"


def test_no_module_imports_from_huggingface_hub_errors_which_the_floor_release_lacks():
    offenders = [
        str(path.relative_to(SOURCE))
        for path in SOURCE.rglob("*.py")
        if re.search(r"^\s*from huggingface_hub\.errors import", path.read_text(), re.MULTILINE)
    ]
    assert offenders == [], "import these from huggingface_hub.utils instead"
