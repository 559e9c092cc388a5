"""The README stays a page a newcomer reads in one sitting: detail goes into docs/."""

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MAX_LINES = 150


def test_the_readme_is_at_most_150_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_LINES}): move detail into docs/"
    )
