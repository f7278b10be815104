"""Every reference from the code to a heading of docs/design.md names a heading that exists.

Docstrings and comments point into the design document by heading; a renamed
or removed heading would leave them pointing nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
REFERENCE = re.compile(r'docs/design\.md, "([^"]+)"')
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)


def _headings() -> list[str]:
    return HEADING.findall(DESIGN.read_text(encoding="utf-8"))


def _references() -> dict[str, list[str]]:
    """Heading -> the files that refer to it."""
    found: dict[str, list[str]] = {}
    files = [ROOT / "pyproject.toml"]
    for folder in ("evio", "tests", "benchmarks", "scripts"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in ("", ".py", ".toml", ".sh")]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for heading in REFERENCE.findall(text):
            found.setdefault(heading, []).append(str(path.relative_to(ROOT)))
    return found


def test_headings_are_unique() -> None:
    headings = _headings()
    assert len(headings) == len(set(headings)), sorted(h for h in headings if headings.count(h) > 1)


def test_every_reference_names_a_heading() -> None:
    references = _references()
    assert references, "no reference to docs/design.md found: the pattern no longer matches the code"
    missing = {heading: files for heading, files in references.items() if heading not in _headings()}
    assert not missing, missing


def test_the_document_stands_on_its_own() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    assert "DESIGN.md" not in text
    assert "../shared" not in text
