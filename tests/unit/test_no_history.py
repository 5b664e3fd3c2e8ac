"""Code says why, not when: no issue numbers, commit ids or dates in ``core/``, ``cli/`` and the READMEs (history
belongs in commit messages, and a benchmark's latest table in benchmarks/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

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


def history_in(path: Path) -> list[str]:
    """Each line of ``path`` that names an issue, a commit or a date, as ``file:line: text``."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        dated = any(date not in DATA_DATES for date in DATE.findall(line))
        if ISSUE.search(line) or (path.suffix == ".py" and COMMIT.search(line)) or dated:
            # a Markdown table may hold hex-looking figures; code holds no commit id
            found.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}: {line.strip()}")
    return found


def test_no_issue_numbers_commit_ids_or_dates() -> None:
    found = [where for path in SOURCES for where in history_in(path)]
    assert not found, "history belongs in commit messages:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for() -> None:
    assert ISSUE.search("the numba kernel (issue 16)") and ISSUE.search("see Issue #5")
    assert COMMIT.search("commit 15b46a8 has the figures") and COMMIT.search("fixed in 7ed46d2")
    assert not COMMIT.search("deadbeef") and not COMMIT.search("1234567") and not COMMIT.search("refund-17")
    assert DATE.search("the null result of 2026-09-21") and not DATE.search("ORD-1042, 1 Elm St")


def test_every_offender_is_named_in_one_message(tmp_path: Path) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.md"
    first.write_text("x = 1  # see issue 12\nfixed in 15b46a8\n")
    second.write_text("ok\nthe run of 2026-09-21\n")
    assert [where.split(": ")[0] for where in history_in(first) + history_in(second)] == [
        f"{first}:1",
        f"{first}:2",
        f"{second}:2",
    ]
