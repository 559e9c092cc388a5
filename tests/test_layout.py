"""The layout docs/architecture.md draws: a small package root, one concern per folder, short functions,
and folders that stand in layers, each importing only the layers below it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "convinit"
LONGEST_FUNCTION = 60  # lines, docstring included

# The stack, bottom first: a module may import its own layer and the ones below it, never one above,
# deferred imports (inside functions) and type-checking imports included.
LAYERS = [
    "errors",  # the one error type
    "naming",  # finding things by name: the registry rule, did-you-mean, lazy exports
    "system",  # the ground floor: what convinit needs from the OS and the installed packages
    "config",  # the training configuration
    "models",
    "init",  # initialisation acts on models
    "data",
    "runs",  # a run folder's files: records of the data a run read, checkpoints, metrics
    "analysis",  # figures of models and runs
    "train",  # the plan (where the configuration stops), the builder, one way to open a run, the loop
    "share",  # above train: export reopens a run through train's one way to open a run
    "experiments",
    "speed",
    "cli",
    "__main__",
    "__init__",  # the public API imports (lazily) from every layer
]
# the layers that take typed parts from the plan and never the training configuration itself
BELOW_THE_PLAN = ("system", "naming", "models", "init", "data", "runs", "analysis")


def test_the_package_root_holds_only_the_entry_points():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py", "errors.py"]


TRAIN_MODULES = 12  # train/ reads as setup and a loop: a newcomer finds each idea in one of a few modules
RUN_CLASSES = 3  # classes named after a run: its plan (RunPlan), the run built (Run), a reopened one


def test_train_holds_at_most_twelve_modules():
    modules = sorted(p.name for p in (PACKAGE / "train").glob("*.py"))
    assert len(modules) <= TRAIN_MODULES, modules


def test_at_most_three_classes_of_the_package_are_named_after_a_run():
    """One class per idea: a run's plan, the run built from it, and a run folder reopened; an exception
    (RunInterrupted) or a runner of something else is not a run."""
    named = sorted(
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and "Run" in node.name
        and not node.name.endswith(("Interrupted", "Runner"))
    )
    assert len(named) <= RUN_CLASSES, named


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


def imports_of(path: Path, package: Path) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import of the package's own modules in `path`: top-level,
    deferred, under TYPE_CHECKING, and `importlib.import_module("...")` with a literal name."""
    tree = ast.parse(path.read_text())
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                parts = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")
                if path.name == "__init__.py" and node.level > 1:
                    parts = parts[: -(node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{alias.name}" for alias in node.names]
            for name in names or [base]:
                yield (
                    (name if (package.parent / (name.replace(".", "/") + ".py")).is_file() else base),
                    node.lineno,
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                yield node.args[0].value, node.lineno


def layer_of(module: str) -> str:
    """The layer a module of the package belongs to: its first folder, or the root module's name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's own modules it imports (every kind of import, see `imports_of`)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {
        name: {target for target, _ in imports_of(path, package) if target in modules and target != name}
        for name, path in modules.items()
    }


def upward_imports(package: Path, layers: list[str]) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        for target, line in imports_of(path, package):
            if target.split(".")[0] != package.name:
                continue
            here, there = layer_of(module), layer_of(target)
            if layers.index(there) > layers.index(here):
                found.append(f"{path.relative_to(package)}:{line} ({here}) imports {target} ({there})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan): every import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_part_of_the_package_has_a_place_in_the_stack():
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    parts |= {p.stem for p in PACKAGE.glob("*.py")}
    assert sorted(parts - set(LAYERS)) == [] and len(set(LAYERS)) == len(LAYERS)


def test_no_import_points_up_the_stack_deferred_ones_included():
    assert upward_imports(PACKAGE, LAYERS) == []


def test_no_module_imports_itself_through_others():
    assert cycles(module_graph(PACKAGE)) == []


def test_no_two_layers_import_each_other():
    graph = module_graph(PACKAGE)
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folders.setdefault(layer_of(module), set()).update(
            layer_of(t) for t in targets if layer_of(t) != layer_of(module)
        )
    assert cycles(folders) == []


def test_no_layer_below_the_plan_imports_the_training_configuration():
    offenders = []
    for layer in BELOW_THE_PLAN:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for target, line in imports_of(path, PACKAGE):
                if target.startswith("convinit.config"):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
    assert offenders == []


def test_the_import_checks_find_an_upward_import_and_a_cycle_in_a_package_made_to_have_them(tmp_path):
    """The checks above can fail: a package whose lower layer imports a higher one, deferred, and whose
    two modules import each other."""
    package = tmp_path / "convinit"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text('"""A layer."""\n')
    (package / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    from convinit.high.b import g\n")
    (package / "high" / "b.py").write_text("from convinit.low import a\nfrom . import c\n")
    (package / "high" / "c.py").write_text("import importlib\nimportlib.import_module('convinit.high.b')\n")
    assert upward_imports(package, ["low", "high", "__init__"]) == [
        "low/a.py:2 (low) imports convinit.high.b (high)"
    ]
    # b and c import each other; a's deferred import of b closes a loop through a too
    assert cycles(module_graph(package)) == [["convinit.high.b", "convinit.high.c", "convinit.low.a"]]
