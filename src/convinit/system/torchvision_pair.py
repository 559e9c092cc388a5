"""torch and torchvision must be builds for each other; a pair that is not is named in one line with its fix.

pip keeps a torch that is already installed and takes torchvision from the registry, so a machine with a
CPU torch easily ends up with a torchvision built for another release; importing it then fails with
`RuntimeError: operator torchvision::nms does not exist`, deep inside whatever imported it (timm,
transformers, torchvision's v2 transforms). convinit imports torchvision only where it is used (mixup
and cutmix, paper 1's RandAugment, timm and transformers models, the streamed loader's transforms,
downloads), through `import_torchvision` or under `needs_torchvision`, which turn that failure into a
one-line error naming the torchvision release that matches the installed torch. `check_pair` runs before
a training run starts: an error when the run uses torchvision, a one-line warning when it does not. A pair
of the right release but another device's build (torch 2.13.0+cpu beside the default index's torchvision
0.28.0, a CUDA build) is told apart by the build tags, and the fix names, beside the command for the index
torch came from, the default index's pair for machines that cannot reach PyTorch's own index.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from types import ModuleType

from convinit.errors import InstallError

TORCHVISION_MINOR_OFFSET = 15  # torchvision 0.(m + 15) is built for torch 2.m: 0.16 for 2.1 ... 0.29 for 2.14


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def torch_version() -> str | None:
    """The installed torch's version with its build tag (2.14.1+cpu): torch's own once imported (the
    package metadata may lack the tag), else the metadata's."""
    torch = sys.modules.get("torch")
    return getattr(torch, "__version__", None) or installed_version("torch")


def torchvision_version() -> str | None:
    """The installed torchvision's version with its build tag (0.29.1+cpu, 0.29.1+cu130), read from its
    version.py as text, not imported (the package metadata of a wheel may lack the tag); the metadata's
    version where the file is missing or names another release."""
    listed = installed_version("torchvision")
    try:
        spec = importlib.util.find_spec("torchvision")
        folder = Path(next(iter(spec.submodule_search_locations or []))) if spec else None
        text = (folder / "version.py").read_text() if folder else ""
    except (ImportError, ValueError, OSError, StopIteration):
        text = ""
    found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.M)
    if listed is None or found is None or found[1].split("+")[0] != listed.split("+")[0]:
        return listed
    return found[1]


def build_of(version: str) -> str:
    """The build a version names: '2.14.1+cpu' -> 'cpu', '0.29.1+cu130' -> 'cu130', '0.29.1' -> ''."""
    return version.partition("+")[2]


def matching_torchvision(torch_version: str) -> str | None:
    """The torchvision release built for `torch_version` ("2.14.1+cpu" -> "0.29.1"); None if unknown."""
    release = torch_version.split("+")[0].split(".")
    try:
        major, minor, patch = (int("".join(ch for ch in part if ch.isdigit()) or 0) for part in release[:3])
    except ValueError:
        return None
    return f"0.{minor + TORCHVISION_MINOR_OFFSET}.{patch}" if major == 2 else None


def fix_command(torch_version: str, reinstall: bool = False) -> str:
    """The pip command that installs the torchvision matching `torch_version`, from the index its build came
    from (a local version such as +cpu or +cu130 names the PyTorch index)."""
    wanted = matching_torchvision(torch_version)
    spec = f"torchvision=={wanted}" if wanted else "torchvision"
    build = torch_version.partition("+")[2]
    index = f" --index-url https://download.pytorch.org/whl/{build}" if build else ""
    return f"pip install {'--force-reinstall ' if reinstall else ''}{spec}{index}"


def default_index_command(torch_version: str) -> str | None:
    """Where PyTorch's own index cannot be reached: the pair of the same release from the default index
    (its builds bring the CUDA libraries and run on a CPU too); torch is uninstalled first, since pip takes
    an installed 2.14.1+cpu for torch==2.14.1 and would keep it. None for an unknown release."""
    wanted = matching_torchvision(torch_version)
    if wanted is None:
        return None
    release = torch_version.split("+")[0]
    return f"pip uninstall -y torch torchvision && pip install torch=={release} torchvision=={wanted}"


def pair_message(problem: BaseException | str) -> str:
    """One line: which torch and torchvision disagree, the error it gives, and the commands that fix it: from
    the index torch's build came from, or, where that index cannot be reached, the default index's pair."""
    torch = torch_version() or "?"
    vision = torchvision_version() or "?"
    detail = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    wanted = matching_torchvision(torch)
    same = wanted is not None and vision.split("+")[0] == wanted  # the right release, another build
    action = f"reinstall the build of torchvision {wanted}" if same else f"install torchvision {wanted or ''}"
    fallback = default_index_command(torch) if build_of(torch) else None
    where = (
        f"; where that index cannot be reached, the default index's pair: `{fallback}`" if fallback else ""
    )
    return (
        f"torchvision {vision} does not work with torch {torch} ({detail}); {action.rstrip()} matching "
        f"torch {torch}: `{fix_command(torch, reinstall=same)}`{where}"
    )


def import_torchvision(purpose: str = "this run") -> ModuleType:
    """torchvision, imported; InstallError in one line if it is missing or built for another torch."""
    try:
        import torchvision
    except ModuleNotFoundError as exc:
        if exc.name != "torchvision":
            raise InstallError(pair_message(exc)) from exc
        raise InstallError(f"{purpose} needs torchvision: `{fix_command(torch_version() or '')}`") from exc
    except Exception as exc:  # RuntimeError: operator torchvision::nms does not exist, OSError, ...
        raise InstallError(pair_message(exc)) from exc
    has_ops = getattr(getattr(torchvision, "extension", None), "_has_ops", None)
    if callable(has_ops) and not has_ops():  # imported, but its compiled operators did not load
        raise InstallError(pair_message("torchvision's compiled operators did not load"))
    return torchvision


@contextmanager
def needs_torchvision(purpose: str) -> Iterator[None]:
    """Around imports of packages that import torchvision themselves (timm, transformers): a broken pair
    is reported as such, not as the package's own traceback."""
    if installed_version("torchvision") is not None:
        import_torchvision(purpose)
    yield


def pair_disagrees() -> bool:
    """Whether the installed torchvision is not the release built for the installed torch, or a build for
    another device (0.28.0 from the default index, a CUDA build, beside torch 2.13.0+cpu): read from the
    versions alone, nothing is imported."""
    torch, vision = torch_version(), torchvision_version()
    if torch is None or vision is None:
        return False
    wanted = matching_torchvision(torch)
    if wanted is not None and vision.split("+")[0].rsplit(".", 1)[0] != wanted.rsplit(".", 1)[0]:
        return True
    torch_build, vision_build = build_of(torch), build_of(vision)  # the CPU index tags both its builds
    return (torch_build == "cpu") != (vision_build == "cpu") and bool(torch_build or vision_build == "cpu")


def check_pair(needed_for: str | None) -> None:
    """Before a run: a run that uses torchvision (`needed_for` says for what) imports it now, an InstallError
    if it cannot; for another run, a torchvision of another release than torch's that does not import is
    one warning line."""
    if "torchvision" in sys.modules or (needed_for is None and not pair_disagrees()):
        return
    try:
        import_torchvision(needed_for or "this run")
    except InstallError as exc:
        if needed_for is not None:
            raise
        if str(exc) not in _WARNED:  # once a process: a grid or the demo checks before each of its runs
            _WARNED.add(str(exc))
            print(f"convinit: warning: {exc} (this run does not use it)", file=sys.stderr)


_WARNED: set[str] = set()
