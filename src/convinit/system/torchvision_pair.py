"""torch and torchvision must be builds for each other; a pair that is not is named in one line with its fix.

pip keeps a torch that is already installed and takes torchvision from the registry, so a machine with a
CPU torch easily ends up with a torchvision built for another release; importing it then fails with
`RuntimeError: operator torchvision::nms does not exist`, deep inside whatever imported it (timm,
transformers, torchvision's v2 transforms). convinit imports torchvision only where it is used (mixup
and cutmix, paper 1's RandAugment, timm and transformers models, the streamed loader's transforms,
downloads), through `import_torchvision` or under `needs_torchvision`, which turn that failure into a
one-line error naming the torchvision release that matches the installed torch. `check_pair` runs before
a training run starts: an error when the run uses torchvision, a one-line warning when it does not.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
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


def pair_message(problem: BaseException | str) -> str:
    """One line: which torch and torchvision disagree, the error it gives, and the command that fixes it."""
    torch = torch_version() or "?"
    vision = installed_version("torchvision") or "?"
    detail = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    wanted = matching_torchvision(torch)
    same = wanted is not None and vision.split("+")[0] == wanted  # the right release, another build
    action = f"reinstall the build of torchvision {wanted}" if same else f"install torchvision {wanted or ''}"
    return (
        f"torchvision {vision} does not work with torch {torch} ({detail}); {action.rstrip()} matching "
        f"torch {torch}: `{fix_command(torch, reinstall=same)}`"
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
    return torchvision


@contextmanager
def needs_torchvision(purpose: str) -> Iterator[None]:
    """Around imports of packages that import torchvision themselves (timm, transformers): a broken pair
    is reported as such, not as the package's own traceback."""
    if installed_version("torchvision") is not None:
        import_torchvision(purpose)
    yield


def pair_disagrees() -> bool:
    """Whether the installed torchvision is not the release built for the installed torch (read from the
    packages' metadata: nothing is imported)."""
    torch, vision = torch_version(), installed_version("torchvision")
    if torch is None or vision is None:
        return False
    wanted = matching_torchvision(torch)
    return wanted is not None and vision.split("+")[0].rsplit(".", 1)[0] != wanted.rsplit(".", 1)[0]


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
        print(f"convinit: warning: {exc} (this run does not use it)", file=sys.stderr)
