"""Code says why, not when: no issue numbers or commit ids in ``core/`` and ``cli/`` (history belongs in commit
messages, and a benchmark's latest table in benchmarks/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for folder in ("core", "cli") for p in (REPO / folder).rglob("*.py"))
ISSUE = re.compile(r"\b(?:issues?|tickets?|PR)\s*#?\d+\b", re.IGNORECASE)
# A commit id: seven to forty hex digits with a letter and a digit among them (not a word, not a number).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_issue_numbers_or_commit_ids(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        assert not ISSUE.search(line), f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        assert not COMMIT.search(line), f"{path.relative_to(REPO)}:{number}: {line.strip()}"


def test_the_patterns_catch_what_they_are_for() -> None:
    assert ISSUE.search("the numba kernel (issue 16)") and ISSUE.search("see Issue #5")
    assert COMMIT.search("commit 15b46a8 has the figures") and COMMIT.search("fixed in 7ed46d2")
    assert not COMMIT.search("deadbeef") and not COMMIT.search("1234567") and not COMMIT.search("refund-17")
