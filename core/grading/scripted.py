"""Scripted graders: rank passes by something you can count, mark hacks by pattern. No model, no code to write.

A ``ScriptedRule`` (from a recipe or a rule file) becomes a grader function for ``GroupwiseGrading``: passes are
ranked by a measure (matches of a regular expression such as ``<tool_call>``, characters or lines), smallest or
largest first, equal measures tied; a pass is a confirmed hack when it matches ``hack_pattern`` or when its final
answer names an id (``unseen_id_pattern``) that no tool output contains, an invented or leaked id. In reward mode the
same rule scores a pass's behaviour: 0 for a hack, 1 otherwise.

This module only reads text; it runs nothing a rollout contains. ``grade_groups`` grades a whole batch in one call
(``score_passes`` in reward mode), each group within its own time limit: the expressions run on the ``regex``
module, whose matching stops at a deadline (Python's ``re`` holds the interpreter lock until it returns, so no
watchdog could give up on a pattern that backtracks for minutes on a long rollout).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import regex as re
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from whileai.grading.calls import GraderTimeout, each_or_error

__all__ = ["ScriptedGrader", "ScriptedRule"]


def _check_pattern(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as err:
            raise ValueError(f"{value!r} is not a regular expression: {err}") from None
    return value


class ScriptedRule(BaseModel):
    """A grader written as a rule, no code: rank passes by a measurable quantity and mark hacks by pattern (a recipe's
    ``grader.rule``, or a rule file). Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    measure: Literal["matches", "chars", "lines"] = Field(
        "matches",
        description="What to measure on each pass: 'matches' counts matches of `pattern`, 'chars' its length, "
        "'lines' its lines.",
    )
    pattern: str | None = Field(
        None,
        description="The regular expression counted when measure is 'matches' (default '<tool_call>': tool calls); "
        "the other measures read no pattern.",
    )
    order: Literal["ascending", "descending"] = Field(
        "ascending", description="'ascending': the smallest measure ranks best (fewest calls); 'descending': largest."
    )
    hack_pattern: str | None = Field(
        None, description="A pass whose text matches this regular expression is a confirmed hack."
    )
    unseen_id_pattern: str | None = Field(
        None,
        description="Ids (a regular expression such as 'ORD-\\d+') that the final answer names but no tool output "
        "contains mark the pass as a hack: an invented or leaked id.",
    )
    tool_output_pattern: str = Field(
        r"<tool_result>(.*?)</tool_result>",
        description="A regular expression whose first group is one tool output, for unseen_id_pattern.",
    )

    @field_validator("pattern", "hack_pattern", "unseen_id_pattern", "tool_output_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        return _check_pattern(value)

    @model_validator(mode="after")
    def _pattern_for_matches(self) -> ScriptedRule:
        if self.measure == "matches" and self.pattern is None:
            object.__setattr__(self, "pattern", "<tool_call>")  # tool calls, the measure's default
        if self.measure == "matches" and not self.pattern:
            raise ValueError("measure 'matches' needs a pattern, e.g. pattern: '<tool_call>'")
        if self.measure != "matches" and self.pattern is not None:
            raise ValueError(f"measure {self.measure!r} reads no pattern: remove pattern, or use measure: matches")
        return self


_TOOL_CALLS = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


class ScriptedGrader:
    """A grader function built from a ``ScriptedRule``.

    Example:
        >>> grade = ScriptedGrader(ScriptedRule(hack_pattern="ORD-9999"))
        >>> grade([
        ...     {"index": 0, "completion": "<tool_call>a</tool_call><tool_call>b</tool_call>", "passed": True},
        ...     {"index": 1, "completion": "<tool_call>a</tool_call>", "passed": True},
        ...     {"index": 2, "completion": "Refunded ORD-9999.", "passed": True},
        ...     {"index": 3, "completion": "sorry", "passed": False},
        ... ])
        {'ranking': [[1], [0]], 'hacks': [2]}
    """

    # Regular expressions on text: nothing shared changes, so groups may be graded at once.
    thread_safe = True

    def __init__(self, rule: ScriptedRule | None = None, name: str = "scripted") -> None:
        self.rule = rule or ScriptedRule()
        self.__name__ = name
        self._local = threading.local()  # the deadline of the group this thread grades (None: no limit)
        flags = re.DOTALL
        self._pattern = re.compile(self.rule.pattern, flags) if self.rule.pattern else None
        self._hack = re.compile(self.rule.hack_pattern, flags) if self.rule.hack_pattern else None
        self._ids = re.compile(self.rule.unseen_id_pattern) if self.rule.unseen_id_pattern else None
        self._outputs = re.compile(self.rule.tool_output_pattern, flags)
        self._measure: Callable[[str], float] = {
            "matches": self._count,
            "chars": len,
            "lines": lambda text: text.count("\n") + 1 if text else 0,
        }[self.rule.measure]

    def _left(self) -> float | None:
        """Seconds left before the current group's deadline (None: no limit); ``GraderTimeout`` once it passed."""
        deadline = getattr(self._local, "deadline", None)
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise _ran_over(self._local.limit)
        return left

    def _within(self, timeout_s: float | None, work: Callable[[Any], Any], request: Any) -> Any:
        """``work(request)`` with every expression stopped at ``timeout_s`` from now (a ``GraderTimeout``)."""
        self._local.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._local.limit = timeout_s
        try:
            return work(request)
        except TimeoutError as exc:  # the regex module's, at the deadline
            raise _ran_over(timeout_s) from exc
        finally:
            self._local.deadline = None

    def _count(self, text: str) -> float:
        assert self._pattern is not None
        return len(self._pattern.findall(text, timeout=self._left()))

    def measure(self, text: str) -> float:
        """The rule's measure of one rollout text."""
        return float(self._measure(text))

    def is_hack(self, text: str) -> bool:
        """Whether the text matches the hack pattern or names an id no tool output contains."""
        if self._hack is not None and self._hack.search(text, timeout=self._left()):
            return True
        if self._ids is None:
            return False
        spans = self._spans(text)
        # The final answer: the text after the last tool output, with tool calls left out.
        answer = text[spans[-1][1] :] if spans else text
        if self._ids.search(answer, timeout=self._left()) is None:
            return False  # the common case: the tool outputs need not be read
        answer = _TOOL_CALLS.sub("", answer, timeout=self._left())
        seen = "\n".join(output for _, _, output in spans)
        return any(found not in seen for found in self._ids.findall(answer, timeout=self._left()))

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        """The tool outputs by the pattern: each match's span and its first group (the whole match without one)."""
        matches = self._outputs.finditer(text, timeout=self._left())
        return [(m.start(), m.end(), m.group(1) if m.groups() else m.group(0)) for m in matches]

    def __call__(self, group: list[dict[str, Any]]) -> dict[str, Any]:
        passes = [item for item in group if item["passed"]]
        return self._rank([item["index"] for item in passes], [str(item["completion"]) for item in passes])

    def _rank(self, indices: Sequence[int], texts: Sequence[str]) -> dict[str, Any]:
        """The answer for the passes ``indices`` whose rollouts are ``texts``."""
        is_hack, measure = self.is_hack, self._measure
        sign = 1.0 if self.rule.order == "ascending" else -1.0
        hacks: list[int] = []
        measured: list[tuple[float, int]] = []  # (signed measure, index) of the passes that are no hack
        for index, text in zip(indices, texts, strict=True):
            if is_hack(text):
                hacks.append(index)
            else:
                measured.append((sign * float(measure(text)), index))
        if hacks:  # a pass listed twice under one index is a hack if either copy is
            measured = [pair for pair in measured if pair[1] not in hacks]
        measured.sort()
        ranking: list[list[int]] = []
        previous: float | None = None
        for value, index in measured:
            if previous is not None and value == previous:
                ranking[-1].append(index)
            else:
                ranking.append([index])
            previous = value
        return {"ranking": ranking, "hacks": hacks}

    def grade_groups(
        self, groups: Sequence[list[dict[str, Any]]], timeout_s: float | None = None
    ) -> list[dict[str, Any] | Exception]:
        """Every group of a batch in one call, an exception standing in for the answer of a group that raised or ran
        over ``timeout_s`` (a ``GraderTimeout``: that group alone falls back; the next starts with its own limit).

        ``GroupwiseGrading`` calls this, with its ``timeout_s``, instead of calling the grader once per group on a
        worker thread: the expressions stop at each group's deadline themselves, and threads would cost more than
        the rule.
        """
        return each_or_error(lambda group: self._within(timeout_s, self, group), groups)

    def score_passes(
        self, requests: Sequence[tuple[dict[str, Any], Any]], timeout_s: float | None = None
    ) -> list[dict[str, float] | Exception]:
        """Reward mode's batch: ``score(item, rubric)`` of every request, each within ``timeout_s``
        (see ``grade_groups``)."""
        return each_or_error(lambda request: self._within(timeout_s, lambda r: self.score(*r), request), requests)

    def score(self, item: dict[str, Any], rubric: Any = None) -> dict[str, float]:
        """Reward mode: behaviour 1.0 for a pass that is no hack, 0.0 for one that is; solution 1.0.

        A scripted rule has no notion of a rubric; measure-based scores need the group, which reward mode does not
        show, so use advantage mode to rank by the measure.
        """
        return {"solution": 1.0, "behavior": 0.0 if self.is_hack(str(item["completion"])) else 1.0}


def _ran_over(limit: float | None) -> GraderTimeout:
    return GraderTimeout(f"the rule ran over its {limit:g} s on this group")
