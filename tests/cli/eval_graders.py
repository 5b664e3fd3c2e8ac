"""Python graders of known quality for ``whileai judge-eval``'s tests, each loaded by ``--grader
tests/cli/eval_graders.py:NAME``.

The tests' rows write each pass's reference quality into its text as ``q<N>`` and mark a hack with ``ORD-9999``; a
grader here reads that, or the position, or the length, or nothing. ``oracle`` knows the reference of any rows file
named by ``WHILEAI_TEST_ORACLE`` (``whileai simulate``'s rows: quality and hack by text).
"""

from __future__ import annotations

import json
import os
import random
import re
from typing import Any

from whileai.errors import GraderUnavailable

HACK = "ORD-9999"
_QUALITY = re.compile(r"\bq(\d+)\b")
_rng = random.Random(int(os.environ.get("WHILEAI_TEST_SEED", "0")))


def _passes(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [g for g in group if g["passed"]]


def _tiers(passes: list[dict[str, Any]], key: Any, descending: bool = True) -> list[list[int]]:
    """A best-first ranking of ``passes`` by ``key``, equal keys tied."""
    values = sorted({key(g) for g in passes}, reverse=descending)
    return [[g["index"] for g in passes if key(g) == value] for value in values]


def _quality(item: dict[str, Any]) -> int:
    return int(_QUALITY.search(item["completion"]).group(1))  # type: ignore[union-attr]


def perfect(group):
    """Ranks by the written quality, ties equal ones, flags every ORD-9999 pass."""
    passes = _passes(group)
    hacks = [g["index"] for g in passes if HACK in g["completion"]]
    return {"ranking": _tiers([g for g in passes if g["index"] not in hacks], _quality), "hacks": hacks}


def suspicious(group):
    """``perfect``, and also flags each group's worst honest pass as a hack."""
    answer = perfect(group)
    if answer["ranking"]:
        worst = answer["ranking"].pop()
        answer["hacks"] = [*answer["hacks"], *worst]
    return answer


def by_position(group):
    """Ranks the passes in the order shown."""
    return {"ranking": [g["index"] for g in _passes(group)]}


def longest_first(group):
    """Ranks by length, the longest first."""
    return {"ranking": _tiers(_passes(group), lambda g: len(g["completion"]))}


def constant(group):
    """Ties every pass."""
    return {"ranking": [[g["index"] for g in _passes(group)]]}


def seeded_random(group):
    """A seeded shuffle per call: reads nothing."""
    passes = [g["index"] for g in _passes(group)]
    _rng.shuffle(passes)
    return {"ranking": passes}


def raises(group):
    return {"ranking": [1 / 0]}


def nonsense(group):
    return "I like the second one best"


def nonsense_on_copies(group):
    """``perfect``, but an unusable answer for a group with two identical passes (the reordered showing's copy)."""
    texts = [g["completion"] for g in _passes(group)]
    if len(set(texts)) < len(texts):
        return "I like the second one best"
    return perfect(group)


def unavailable(group):
    raise GraderUnavailable("the judge at http://127.0.0.1:9 is down")


_oracle: dict[tuple[str, str], tuple[float, bool]] = {}


def oracle(group):
    """Ranks by the reference of the rows file named by ``WHILEAI_TEST_ORACLE`` and flags its hacks."""
    if not _oracle:
        with open(os.environ["WHILEAI_TEST_ORACLE"]) as handle:
            for line in handle:
                row = json.loads(line)
                _oracle[row["prompt"], row["final_text"]] = (row["quality"], row["hack"])
    passes = _passes(group)
    hacks = [g["index"] for g in passes if _oracle[g["prompt"], g["completion"]][1]]
    honest = [g for g in passes if g["index"] not in hacks]
    return {"ranking": _tiers(honest, lambda g: _oracle[g["prompt"], g["completion"]][0]), "hacks": hacks}
