"""docs/design.md: every section the code or the page itself cites exists, and its headings and links are sound."""

from __future__ import annotations

import re
from pathlib import Path

from model_checks import ROOT

DESIGN = ROOT / "docs" / "design.md"
# "## 4. PD-SSM" -> "4", "### 4.2 Generating P and D" -> "4.2"
HEADING = re.compile(r"^(#{2,3}) (\d+(?:\.\d+)?)\.? (.+)$", re.MULTILINE)
# A citation of the design notes and its run of section numbers: "docs/design.md §4", "docs/design.md §2, §9";
CITATION = re.compile(r"docs/design\.md((?:\s*(?:,|and)?\s*§\s*\d+(?:\.\d+)?)+)")
# The older spelling "DESIGN §N" cited a document outside the repository; none may remain.
OLD_CITATION = re.compile(r"DESIGN\s*§")
SECTION = re.compile(r"§\s*(\d+(?:\.\d+)?)")
LINK = re.compile(r"\]\(#([^)]+)\)")
TOP_LEVEL_DOCS = ("README.md", "RESULTS.md", "BENCHMARKS.md")


def sections() -> dict[str, str]:
    """Section number -> heading title of docs/design.md."""
    return {number: title for _, number, title in HEADING.findall(DESIGN.read_text(encoding="utf-8"))}


def cited_sections(text: str) -> list[str]:
    return [number for run in CITATION.findall(text) for number in SECTION.findall(run)]


def test_citation_parser_reads_every_spelling():
    """The parser the next test relies on finds every number of a citation."""
    text = "x (docs/design.md §2, §9) y (docs/design.md §6.7) z docs/design.md §4.3 and §10; §5 alone is not a citation"
    assert cited_sections(text) == ["2", "9", "6.7", "4.3", "10"]


def test_no_citation_of_a_design_document_outside_the_repository():
    """Code, scripts, tests, docs and model cards cite the repository's docs/design.md, never "DESIGN §N"."""
    files = [*ROOT.glob("hf_ssm/**/*.py"), *ROOT.glob("scripts/**/*.py"), *ROOT.glob("tests/**/*.py")]
    files += [*ROOT.glob("docs/**/*.md"), *ROOT.glob("model_cards/*.md"), *(ROOT / n for n in TOP_LEVEL_DOCS)]
    stale = [
        f"{path.relative_to(ROOT)}:{lineno}"
        for path in files
        if path != Path(__file__).resolve()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OLD_CITATION.search(line)
    ]
    assert not stale, stale


def test_every_section_cited_in_code_and_docs_exists():
    """Each `docs/design.md §N` in hf_ssm/, scripts/, tests/ and docs/ names a heading of
    docs/design.md, and so does every `§N` cross-reference inside docs/design.md."""
    known = sections()
    missing = []
    files = [*ROOT.glob("hf_ssm/**/*.py"), *ROOT.glob("scripts/**/*.py"), *ROOT.glob("tests/**/*.py")]
    files += [p for p in ROOT.glob("docs/**/*.md") if p != DESIGN] + [ROOT / n for n in TOP_LEVEL_DOCS]
    for path in files:
        if path == Path(__file__).resolve():
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            missing += [f"{path.relative_to(ROOT)}:{lineno} §{n}" for n in cited_sections(line) if n not in known]
    for lineno, line in enumerate(DESIGN.read_text(encoding="utf-8").splitlines(), start=1):
        missing += [f"docs/design.md:{lineno} §{n}" for n in SECTION.findall(line) if n not in known]
    assert not missing, f"citations of sections docs/design.md does not have: {missing}"


def test_headings_are_numbered_once_and_in_order():
    """Top-level sections run 1, 2, 3, ... and each subsection N.M sits under section N, numbered in order."""
    top, subsections = [], {}
    for level, number, _ in HEADING.findall(DESIGN.read_text(encoding="utf-8")):
        if level == "##":
            assert "." not in number, f"section heading {number} should be a whole number"
            top.append(int(number))
        else:
            major, minor = (int(x) for x in number.split("."))
            assert top and major == top[-1], f"subsection {number} is not under section {major}"
            subsections.setdefault(major, []).append(minor)
    assert top == list(range(1, len(top) + 1)) and len(top) >= 11
    for major, minors in subsections.items():
        assert minors == list(range(1, len(minors) + 1)), f"subsections of §{major}: {minors}"


def github_anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def test_contents_links_point_at_headings():
    """Every in-page link of docs/design.md (the contents line) reaches an existing heading."""
    text = DESIGN.read_text(encoding="utf-8")
    anchors = {github_anchor(line.lstrip("#").strip()) for line in text.splitlines() if line.startswith("#")}
    links = LINK.findall(text)
    assert links, "docs/design.md should have a contents line linking its sections"
    assert [link for link in links if link not in anchors] == []
