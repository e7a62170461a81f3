"""The repository is a product, not a lab notebook: no tracked file names or cites an issue tracker that is not in
it ("issue 28", "i26_...", "..._round3"), in its path or in its text."""

from __future__ import annotations

import re
import subprocess

from model_checks import ROOT

TRACKER = re.compile(r"\bissues?[\s_#-]*\d+|\bi\d{2}[_/]|_round\d+\b|\bexp\d{2}\b", re.IGNORECASE)


def tracked_files() -> list[str]:
    """The repository's tracked files (git ls-files), or every file under it where there is no git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [line for line in listed.splitlines() if (ROOT / line).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = (".git", "runs", ".ruff_cache", ".pytest_cache", "__pycache__")
        return [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not any(part in skip or part.endswith(".egg-info") for part in p.parts)
        ]


def test_pattern_finds_every_spelling():
    """The pattern the next test relies on catches each spelling a tracker number took, and not ordinary words."""
    for text in (
        "issue 28",
        "Issue #7",
        "issues 26",
        "issue-15",
        "i26_sent_cyc",
        "runs/i15/x",
        "bisect_round3.sh",
        "runs/exp14/par",
    ):
        assert TRACKER.search(text), text
    for text in ("an issue with the cache", "mi26_x", "round 3 of the search", "expected 14"):
        assert not TRACKER.search(text), text


def test_no_tracker_numbers_in_tracked_paths_or_text():
    """No tracked path, and no line of a tracked text file, holds an issue-tracker number."""
    found = []
    for name in tracked_files():
        if TRACKER.search(name):
            found.append(name)
        if name == "tests/docs/test_no_tracker_numbers.py":
            continue  # its examples above
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary: figures, weights
        found += [
            f"{name}:{n}: {line.strip()[:80]}" for n, line in enumerate(text.splitlines(), 1) if TRACKER.search(line)
        ]
    assert not found, "\n".join(found[:50]) + f"\n({len(found)} in all)"
