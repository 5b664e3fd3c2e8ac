"""Graders that go bad during training, for the spread watch's tests (``grader.function:
tests/integration/watch_graders.py:NAME``).

Each ranks passes as the offline recipe's rule does (fewest characters first, equal lengths tied) until the run has
graded ``WHILEAI_TEST_DEGRADE_AFTER`` groups in training (the lines of the run's ``grading.jsonl``, whose path
``WHILEAI_TEST_GRADING_LOG`` gives; the spread gate's calls write none), then degrades: ``constant`` gives every pass
the same factor, ``position`` ranks passes in the order it is shown them, ``longer`` ranks the longest first (it pays
for length), ``failing`` raises. ``good`` never
degrades: the grader a stopped run resumes with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _degraded() -> bool:
    log = Path(os.environ["WHILEAI_TEST_GRADING_LOG"])
    graded = sum(1 for _ in log.open()) if log.is_file() else 0
    return graded >= int(os.environ["WHILEAI_TEST_DEGRADE_AFTER"])


def _by_length(group: list[dict[str, Any]]) -> dict[str, Any]:
    tiers: dict[int, list[int]] = {}
    for item in group:
        if item["passed"]:
            tiers.setdefault(len(item["completion"]), []).append(item["index"])
    return {"ranking": [tiers[length] for length in sorted(tiers)]}


def constant(group: list[dict[str, Any]]) -> dict[str, Any]:
    if _degraded():
        return {"factors": {item["index"]: 0.8 for item in group if item["passed"]}}
    return _by_length(group)


def position(group: list[dict[str, Any]]) -> dict[str, Any]:
    if _degraded():
        return {"ranking": [item["index"] for item in group if item["passed"]]}
    return _by_length(group)


def longer(group: list[dict[str, Any]]) -> dict[str, Any]:
    ranking = _by_length(group)["ranking"]
    return {"ranking": ranking[::-1] if _degraded() else ranking}


def failing(group: list[dict[str, Any]]) -> dict[str, Any]:
    if _degraded():
        raise RuntimeError("the grader's server went away")
    return _by_length(group)


def good(group: list[dict[str, Any]]) -> dict[str, Any]:
    return _by_length(group)
