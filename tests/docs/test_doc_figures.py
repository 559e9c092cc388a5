"""Every figure in the README and docs/ has the command that made it beside it (a run, a report, a script).

A figure is a Markdown table with a measured number in its body (a cell that is a number, a percentage,
a time or `mean +- std`) or an image. Beside it means: a fenced code block with a `convinit` or `python`
command earlier in the same section (since the last heading) or right after it, before the next table.
`python tests/docs/test_doc_figures.py` lists every figure with its command.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a measured number: a decimal, a percentage or mean +- std (counts and exit codes are not figures)
MEASURED = re.compile(r"^[+-]?[\d,]*\d(\.\d+\s*(%|s|x|ms)?|\s*%)(\s*\+-\s*\d+(\.\d+)?)?$")
COMMAND = re.compile(r"(^|&&|\s)(convinit [a-z]|python [\w/.-]+\.py|python -m |torchrun )", re.M)


@dataclass
class Figure:
    file: Path
    line: int
    what: str  # the table's header row or the image
    command: str | None  # the first command line of the block beside it


def blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of each fenced code block."""
    found, start = [], None
    for index, line in enumerate(lines):
        if line.startswith("```"):
            if start is None:
                start = index
            else:
                found.append((start, index, "\n".join(lines[start + 1 : index])))
                start = None
    return found


def is_measured_table(rows: list[str]) -> bool:
    cells = [c.strip() for row in rows[2:] for c in row.strip().strip("|").split("|")]
    return any(MEASURED.match(cell) for cell in cells if cell not in ("-", ""))


def figures(path: Path) -> list[Figure]:
    lines = path.read_text().splitlines()
    code = blocks(lines)
    inside = {i for start, end, _ in code for i in range(start, end + 1)}
    found, index = [], 0
    while index < len(lines):
        line = lines[index]
        if index in inside:
            index += 1
            continue
        end = index
        if line.startswith("|"):
            while end + 1 < len(lines) and lines[end + 1].startswith("|"):
                end += 1
            if is_measured_table(lines[index : end + 1]):
                found.append(Figure(path, index + 1, line.strip(), command_beside(lines, code, index, end)))
        elif re.match(r"^!\[.*\]\(.*\)", line):
            found.append(Figure(path, index + 1, line.strip(), command_beside(lines, code, index, end)))
        index = end + 1
    return found


def command_beside(lines: list[str], code: list[tuple[int, int, str]], first: int, last: int) -> str | None:
    """The nearest command block in the figure's section: before it (since the last heading), else after
    it (up to the next heading or table)."""
    inside = {i for start, end, _ in code for i in range(start, end + 1)}  # a shell comment is no heading
    heading = max([i for i in range(first) if lines[i].startswith("#") and i not in inside], default=-1)
    later = [i for i in range(last + 1, len(lines)) if lines[i].startswith(("#", "|")) and i not in inside]
    stop = later[0] if later else len(lines)
    before = [text for start, _, text in code if heading < start < first and COMMAND.search(text)]
    after = [text for start, _, text in code if last < start < stop and COMMAND.search(text)]
    chosen = before[-1] if before else after[0] if after else None
    if chosen is None:
        return None
    return next(line.strip() for line in chosen.splitlines() if COMMAND.search(line))


ALL = [figure for path in DOCS for figure in figures(path)]


@pytest.mark.parametrize("figure", ALL, ids=[f"{f.file.name}:{f.line}" for f in ALL])
def test_every_figure_has_its_command_beside_it(figure):
    assert figure.command, f"{figure.file.name}:{figure.line} {figure.what[:80]!r} has no command beside it"


def test_the_paper1_evidence_page_has_figures():
    assert len([f for f in ALL if f.file.name == "paper1.md"]) >= 3


if __name__ == "__main__":
    for figure in ALL:
        print(f"{figure.file.relative_to(ROOT)}:{figure.line}  {figure.what[:70]}")
        print(f"    {figure.command or 'NO COMMAND BESIDE IT'}", file=sys.stdout)
