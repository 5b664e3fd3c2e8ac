"""Scripted graders: rank passes by something you can count, mark hacks by pattern. No model, no code to write.

A ``ScriptedRule`` (from a recipe or a rule file) becomes a grader function for ``GroupwiseGrading``: passes are
ranked by a measure (matches of a regular expression such as ``<tool_call>``, characters or lines), smallest or
largest first, equal measures tied; a pass is a confirmed hack when it matches ``hack_pattern`` or when its final
answer names an id (``unseen_id_pattern``) that no tool output contains, an invented or leaked id. In reward mode the
same rule scores a pass by where its measure falls between the group's best and worst.

This module only reads text; it runs nothing a rollout contains. It is the spread gate's grader by default, so it is
written for speed: a pattern without special characters is counted with ``str.count``, and ``grade_groups`` grades a
whole batch in one call (``score_passes`` in reward mode) instead of one call per group on a worker thread.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

from whileai.config.schema import ScriptedRule
from whileai.grading.calls import each_or_error

__all__ = ["ScriptedGrader"]

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
        flags = re.DOTALL
        self._pattern = re.compile(self.rule.pattern, flags) if self.rule.pattern else None
        self._hack = re.compile(self.rule.hack_pattern, flags) if self.rule.hack_pattern else None
        self._ids = re.compile(self.rule.unseen_id_pattern) if self.rule.unseen_id_pattern else None
        self._outputs = re.compile(self.rule.tool_output_pattern, flags)
        # The tool outputs as (start, end, output) spans: by str.find for the usual ``<open>(.*?)<close>`` pattern
        # with literal ends (the default), 7x faster than the regular expression's lazy scan; by finditer otherwise.
        delimiters = _literal_delimiters(self.rule.tool_output_pattern)
        self._spans: Callable[[str], list[tuple[int, int, str]]] = (
            _delimited_spans(*delimiters) if delimiters is not None else self._regex_spans
        )
        count: Callable[[str], float] = self._count
        if self.rule.pattern and re.escape(self.rule.pattern) == self.rule.pattern:
            # A literal (nothing re.escape would escape): str.count finds the same non-overlapping matches, faster.
            count = _literal_count(self.rule.pattern)
        self._measure: Callable[[str], float] = {
            "matches": count,
            "chars": len,
            "lines": lambda text: text.count("\n") + 1 if text else 0,
        }[self.rule.measure]

    def _count(self, text: str) -> float:
        assert self._pattern is not None
        return len(self._pattern.findall(text))

    def measure(self, text: str) -> float:
        """The rule's measure of one rollout text."""
        return float(self._measure(text))

    def is_hack(self, text: str) -> bool:
        """Whether the text matches the hack pattern or names an id no tool output contains."""
        if self._hack is not None and self._hack.search(text):
            return True
        if self._ids is None:
            return False
        spans = self._spans(text)
        # The final answer: the text after the last tool output, with tool calls left out.
        answer = text[spans[-1][1] :] if spans else text
        if self._ids.search(answer) is None:
            return False  # the common case: the tool outputs need not be read
        answer = _TOOL_CALLS.sub("", answer)
        seen = "\n".join(output for _, _, output in spans)
        return any(found not in seen for found in self._ids.findall(answer))

    def _regex_spans(self, text: str) -> list[tuple[int, int, str]]:
        """The tool outputs by the pattern: each match's span and its first group (the whole match without one)."""
        return [(m.start(), m.end(), m.group(1) if m.groups() else m.group(0)) for m in self._outputs.finditer(text)]

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

    def _rank_texts(self, group: tuple[Sequence[str], Sequence[bool]]) -> dict[str, Any]:
        texts, passed = group
        indices = [i for i, ok in enumerate(passed) if ok]
        return self._rank(indices, [text if type(text := texts[i]) is str else str(text) for i in indices])

    def grade_groups(self, groups: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any] | Exception]:
        """Every group of a batch in one call, an exception standing in for the answer of a group that raised.

        ``GroupwiseGrading`` calls this instead of calling the grader once per group on a worker thread with a time
        limit. That limit buys nothing here: a regular expression holds the interpreter lock until it returns, so
        the waiting thread could not give up on it anyway, and the threads cost more than the rule itself.
        """
        return each_or_error(self, groups)

    def grade_texts(self, groups: Sequence[tuple[Sequence[str], Sequence[bool]]]) -> list[dict[str, Any] | Exception]:
        """``grade_groups`` on what the rule reads of each group: its completions' texts and which of them passed.

        ``GroupwiseGrading`` prefers this batch method when a grader has it: the rule never reads the prompts, so
        they need not be rendered, and no dict is built per member (the spread gate's and the reward function's
        hot path). The answers are the same as ``grade_groups``' on the same members; a subclass that overrides
        ``__call__`` is called with the members, as ``grade_groups`` would.
        """
        if type(self).__call__ is not ScriptedGrader.__call__:
            return self.grade_groups([_members(*group) for group in groups])
        return each_or_error(self._rank_texts, groups)

    def score_passes(self, requests: Sequence[tuple[dict[str, Any], Any]]) -> list[dict[str, float] | Exception]:
        """Reward mode's batch: ``score(item, rubric)`` of every request, in one call (see ``grade_groups``)."""
        return each_or_error(lambda request: self.score(*request), requests)

    def score(self, item: dict[str, Any], rubric: Any = None) -> dict[str, float]:
        """Reward mode: behaviour 1.0 for a pass that is no hack, 0.0 for one that is; solution 1.0.

        A scripted rule has no notion of a rubric; measure-based scores need the group, which reward mode does not
        show, so use advantage mode to rank by the measure.
        """
        return {"solution": 1.0, "behavior": 0.0 if self.is_hack(str(item["completion"])) else 1.0}


def _members(texts: Sequence[str], passed: Sequence[bool]) -> list[dict[str, Any]]:
    """``grade_texts``' input for one group as the members ``__call__`` reads."""
    pairs = enumerate(zip(texts, passed, strict=True))
    return [{"index": i, "completion": text, "passed": ok} for i, (text, ok) in pairs]


def _literal_delimiters(pattern: str) -> tuple[str, str] | None:
    """``(open, close)`` when ``pattern`` is ``open(.*?)close`` with both ends literal (nothing ``re.escape`` would
    escape, ``close`` not empty), else None."""
    head, lazy, tail = pattern.partition("(.*?)")
    if not lazy or not head or not tail or re.escape(head) != head or re.escape(tail) != tail:
        return None
    return head, tail


def _delimited_spans(open_: str, close: str) -> Callable[[str], list[tuple[int, int, str]]]:
    """What ``finditer`` of ``open(.*?)close`` under DOTALL gives, by ``str.find``: from each ``open``, the shortest
    stretch to the next ``close``; the search goes on after that ``close``. When no ``close`` follows an ``open``, none
    follows a later one either: that is the end."""
    skip, close_length = len(open_), len(close)

    def spans(text: str) -> list[tuple[int, int, str]]:
        found: list[tuple[int, int, str]] = []
        find = text.find
        start = find(open_)
        while start >= 0:
            inner = start + skip
            stop = find(close, inner)
            if stop < 0:
                break
            end = stop + close_length
            found.append((start, end, text[inner:stop]))
            start = find(open_, end)
        return found

    return spans


def _literal_count(literal: str) -> Callable[[str], float]:
    """``text.count(literal)``: the matches of a pattern without special characters (a C call, no Python frame)."""
    return operator.methodcaller("count", literal)
