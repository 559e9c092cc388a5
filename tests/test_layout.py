"""The layout docs/architecture.md draws: a small package root, one concern per folder, short functions."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "convinit"
LONGEST_FUNCTION = 60  # lines, docstring included


def test_the_package_root_holds_only_the_entry_points():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py", "errors.py"]


def test_every_folder_of_the_package_is_a_package_that_says_what_it_holds():
    folders = {path.parent for path in PACKAGE.rglob("*.py")}
    for folder in sorted(folders):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.relative_to(PACKAGE)}/ has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(PACKAGE)} has no docstring"


def test_every_folder_of_the_package_is_named_in_the_architecture_page():
    page = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert [name for name in folders if f"  {name}/" not in page] == []


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_the_data_layer_and_the_models_import_neither_the_trainer_nor_analysis():
    offenders = []
    for folder in ("data", "models", "init"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    if node.module.startswith(
                        ("convinit.train", "convinit.analysis", "convinit.experiments")
                    ):
                        offenders.append(f"{path.relative_to(PACKAGE)} imports {node.module}")
    assert offenders == []
