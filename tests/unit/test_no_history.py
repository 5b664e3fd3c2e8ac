"""Code says why, not when: no issue numbers, commit ids or dates in ``core/``, ``cli/`` and the READMEs (history
belongs in commit messages, and a benchmark's latest table in benchmarks/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [p for folder in ("core", "cli") for p in (REPO / folder).rglob("*.py")]
    + [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
)
ISSUE = re.compile(r"\b(?:issues?|tickets?|PR)\s*#?\d+\b", re.IGNORECASE)
# A commit id: seven to forty hex digits with a letter and a digit among them (not a word, not a number).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# A calendar date of this era (an order's date in a doctest, 2025-03-02, is data: it names no event of the project).
DATE = re.compile(r"\b20[2-9]\d-[01]\d-[0-3]\d\b")
DATA_DATES = ("2025-03-02",)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_issue_numbers_commit_ids_or_dates(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        where = f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        assert not ISSUE.search(line), where
        if path.suffix == ".py":  # a Markdown table may hold hex-looking figures; code holds no commit id
            assert not COMMIT.search(line), where
        assert all(date in DATA_DATES for date in DATE.findall(line)), where


def test_the_patterns_catch_what_they_are_for() -> None:
    assert ISSUE.search("the numba kernel (issue 16)") and ISSUE.search("see Issue #5")
    assert COMMIT.search("commit 15b46a8 has the figures") and COMMIT.search("fixed in 7ed46d2")
    assert not COMMIT.search("deadbeef") and not COMMIT.search("1234567") and not COMMIT.search("refund-17")
    assert DATE.search("the null result of 2026-09-21") and not DATE.search("ORD-1042, 1 Elm St")
