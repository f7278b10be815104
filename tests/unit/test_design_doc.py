"""The docs point where they say: references from the code, links between the docs, the decision index.

Docstrings and comments point into docs/design.md and docs/performance.md by heading; the docs link
to each other and to docs/decisions/; a renamed or removed heading or file would leave them pointing
nowhere. The design also stays a document a newcomer finishes: under 700 lines, with the decisions,
the measurements and what is not done kept in their own places.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DESIGN = DOCS / "design.md"
DECISIONS = DOCS / "decisions"
# `docs/design.md, "Heading"`, also across a line break inside a comment or docstring.
REFERENCE = re.compile(r'docs/(design|performance)\.md,?\s*(?:#\s*)?"([^"\n]+(?:\n[ \t]*(?:#[ \t]*)?[^"\n]+)?)"')
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
DECISION_FILE = re.compile(r"^(\d{4})-[a-z0-9]+(?:-[a-z0-9]+)*\.md$")


def _headings(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return [" ".join(h.split()) for h in HEADING.findall(text)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    for heading in _headings(path):
        slug, n = _slug(heading), 1
        while slug in anchors:
            slug, n = f"{_slug(heading)}-{n}", n + 1
        anchors.add(slug)
    return anchors


def _docs() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _references() -> dict[tuple[str, str], list[str]]:
    """(document, heading) -> the files that refer to it, from the code, the tests and the docs."""
    found: dict[tuple[str, str], list[str]] = {}
    files = [ROOT / "pyproject.toml", *_docs()]
    for folder in ("evio", "tests", "benchmarks", "scripts"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in ("", ".py", ".toml", ".sh")]
    for path in files:
        if path == Path(__file__).resolve():
            continue  # its own patterns and messages
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for doc, heading in REFERENCE.findall(text):
            if heading != "<heading>":
                found.setdefault((doc, " ".join(heading.split())), []).append(str(path.relative_to(ROOT)))
    return found


def test_headings_are_unique() -> None:
    headings = _headings(DESIGN)
    assert len(headings) == len(set(headings)), sorted(h for h in headings if headings.count(h) > 1)


def test_every_reference_names_a_heading() -> None:
    references = _references()
    assert any(doc == "design" for doc, _ in references), (
        "no reference to docs/design.md found: the pattern no longer matches"
    )
    headings = {doc: set(_headings(DOCS / f"{doc}.md")) for doc in ("design", "performance")}
    missing = {f"docs/{doc}.md, {h!r}": files for (doc, h), files in references.items() if h not in headings[doc]}
    assert not missing, missing


def test_every_link_between_the_docs_arrives() -> None:
    broken = []
    for path in _docs():
        for _, target in LINK.findall(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_decision_index_lists_every_decision_once() -> None:
    files = sorted(p.name for p in DECISIONS.glob("*.md") if p.name != "README.md")
    assert files, "no decision in docs/decisions/"
    assert all(DECISION_FILE.match(f) for f in files), [f for f in files if not DECISION_FILE.match(f)]
    numbers = [f[:4] for f in files]
    assert numbers == [f"{n:04d}" for n in range(1, len(files) + 1)], (
        "decisions are numbered 0001, 0002, ... without gaps"
    )
    index = (DECISIONS / "README.md").read_text(encoding="utf-8")
    listed = [target for _, target in LINK.findall(index) if DECISION_FILE.match(target)]
    assert sorted(listed) == files, {
        "not listed": sorted(set(files) - set(listed)),
        "listed twice": sorted({f for f in listed if listed.count(f) > 1}),
    }
    for name in files:
        title = (DECISIONS / name).read_text(encoding="utf-8").split("\n", 1)[0]
        assert title.startswith(f"# {name[:4]}. "), (
            f"{name}: the first line is '# {name[:4]}. <the decision>', not {title!r}"
        )


def test_the_design_is_one_a_newcomer_finishes() -> None:
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 700, (
        f"docs/design.md has {len(lines)} lines: decisions go to docs/decisions/, figures to docs/performance.md"
    )
    # What is not done lives in the issue tracker, the decisions and the figures in their own files.
    elsewhere = {h.lower() for h in _headings(DESIGN)} & {"known gaps", "decisions", "figures against the paper"}
    assert not elsewhere, f"docs/design.md keeps sections that belong elsewhere: {sorted(elsewhere)}"


def test_the_document_stands_on_its_own() -> None:
    for path in _docs():
        text = path.read_text(encoding="utf-8")
        assert "DESIGN.md" not in text, path
        assert "../shared" not in text, path
