"""The code cites the project's own statement of the method, and every citation lands on a section of it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"docs/method\.md §(\d+)(?:(?: and §|-)(\d+))?")


def cited_sections() -> dict[int, list[str]]:
    cited: dict[int, list[str]] = {}
    for folder in ("src", "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in {".py", ".yaml"} or not path.is_file():
                continue
            for match in CITATION.finditer(path.read_text()):
                for number in filter(None, match.groups()):
                    cited.setdefault(int(number), []).append(str(path.relative_to(ROOT)))
    return cited


def test_every_method_citation_in_the_code_names_a_section_of_docs_method():
    headings = {int(n) for n in re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "method.md").read_text(), re.M)}
    cited = cited_sections()
    assert cited, "the code cites no section of docs/method.md"
    missing = {number: files[:3] for number, files in cited.items() if number not in headings}
    assert not missing, f"citations of sections docs/method.md does not have: {missing}"


def test_the_code_cites_no_document_outside_the_repository():
    stale = []
    for folder in ("src", "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".yaml", ".md"} and path.is_file() and path.name != Path(__file__).name:
                if re.search(r"\bSPEC\b", path.read_text()):
                    stale.append(str(path.relative_to(ROOT)))
    assert not stale, f"these files cite SPEC, which is not part of the repository: {stale}"
