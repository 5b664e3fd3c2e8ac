"""Running counters of a ``GroupwiseGrading`` object: what its grader saw, did and failed to do.

The counters accumulate over every call on the object (``check_spread``, ``shape``, ``trl_reward``), so a run's
grader is a measurement too. This module keeps numbers; it calls no grader and prints nothing by itself.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["GradingStats", "ScoreMoments", "mostly_fell_back"]


@dataclass
class ScoreMoments:
    """Count, mean and population variance of a stream of scores (Welford's update, stable for long runs)."""

    count: int = 0
    mean: float = 0.0
    _m2: float = 0.0

    def add(self, value: float) -> None:
        self.extend((value,))

    def extend(self, values: Iterable[float]) -> None:
        count, mean, m2 = self.count, self.mean, self._m2  # in locals: the counters add 140,000 scores a spread check
        for value in values:
            count += 1
            delta = value - mean
            mean += delta / count
            m2 += delta * (value - mean)
        self.count, self.mean, self._m2 = count, mean, m2

    @property
    def std(self) -> float:
        """Population standard deviation (0 for fewer than two scores)."""
        return math.sqrt(self._m2 / self.count) if self.count > 1 else 0.0


@dataclass
class GradingStats:
    """What a grading object has seen since it was built.

    Attributes:
        mode: ``"advantage"`` (scores are quality factors) or ``"reward"`` (scores are S_sol * S_beh).
        groups: groups seen, graded or not.
        mixed: groups holding both a pass and a failure by the verifier.
        grader_calls: calls made to the grader (one per group in advantage mode, one per pass in reward mode).
        failed: groups that fell back to their original advantages or rewards because the grader misbehaved.
        fallbacks: ``failed`` broken down by kind (the exception's type, a judge call's ``"http 429"``,
            ``"unusable answer"``, ``"grader timed out"``, ...).
        first_failures: the first reason seen of each kind, whole.
        hacks_zeroed: confirmed hacks treated as failures (given a failure's reward).
        unscorable: completions the verifier could not score (None, NaN, inf), left out of their groups; the
            verifier's doing, not the grader's, so never in ``failed``.
        scores: the grader's scores (factors in advantage mode).
        grader_seconds: wall time spent inside the grader.
        sent: groups sent to the grader (graded, or fallen back on its failure).
    """

    mode: Literal["advantage", "reward"] = "advantage"
    groups: int = 0
    mixed: int = 0
    grader_calls: int = 0
    failed: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    first_failures: dict[str, str] = field(default_factory=dict)
    hacks_zeroed: int = 0
    scores: ScoreMoments = field(default_factory=ScoreMoments)
    grader_seconds: float = 0.0
    unscorable: int = 0
    sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def score_name(self) -> str:
        return "factors" if self.mode == "advantage" else "scores"

    def record_groups(self, groups: Iterable[Any], hack_zero: bool) -> None:
        """Count a batch of graded groups (``GradedGroup``, live or read back from ``grading.jsonl``) under one lock.

        Args:
            groups: the groups, in order.
            hack_zero: whether confirmed hacks were treated as failures (then they count in ``hacks_zeroed``).
        """
        with self._lock:
            fallbacks, first_failures, add_scores = self.fallbacks, self.first_failures, self.scores.extend
            for group in groups:
                self.groups += 1
                self.mixed += int(group.mixed)
                self.grader_calls += group.grader_calls
                reason = group.reason
                if hack_zero and reason is None:
                    self.hacks_zeroed += len(group.hacks)
                self.grader_seconds += group.seconds
                self.unscorable += group.unscorable
                self.sent += group.graded or reason is not None
                if reason is not None:
                    kind = group.failure or reason.split(":", 1)[0]
                    self.failed += 1
                    fallbacks[kind] += 1
                    first_failures.setdefault(kind, reason)
                if group.scores:
                    add_scores(group.scores)

    def snapshot(self) -> GradingStats:
        """A copy of the counters, to restore after work that is redone (a re-read of a rows file)."""
        with self._lock:
            copy = GradingStats(self.mode, self.groups, self.mixed, self.grader_calls, self.failed)
            copy.fallbacks = Counter(self.fallbacks)
            copy.first_failures = dict(self.first_failures)
            copy.hacks_zeroed = self.hacks_zeroed
            copy.scores = ScoreMoments(self.scores.count, self.scores.mean, self.scores._m2)
            copy.grader_seconds = self.grader_seconds
            copy.unscorable = self.unscorable
            copy.sent = self.sent
        return copy

    def as_dict(self) -> dict[str, Any]:
        """The counters as plain JSON-ready values."""
        return {
            "mode": self.mode,
            "groups": self.groups,
            "mixed": self.mixed,
            "grader_calls": self.grader_calls,
            "failed": self.failed,
            "fallbacks": dict(self.fallbacks),
            "first_failures": dict(self.first_failures),
            "hacks_zeroed": self.hacks_zeroed,
            "scores": self.scores.count,
            "score_mean": self.scores.mean if self.scores.count else None,
            "score_std": self.scores.std if self.scores.count else None,
            "grader_seconds": self.grader_seconds,
            "unscorable": self.unscorable,
            "sent": self.sent,
        }

    def __str__(self) -> str:
        head = (
            f"groupwise grading ({self.mode}): {self.groups} groups, {self.mixed} mixed, "
            f"{self.grader_calls} grader calls, {self.failed} failed (fell back), {self.hacks_zeroed} hacks zeroed"
        )
        if self.unscorable:
            head += f", {self.unscorable} verifier unscorable"
        if not self.scores.count:
            return f"{head}; no {self.score_name} yet"
        return f"{head}; {self.score_name} mean {self.scores.mean:.3f} std {self.scores.std:.3f}"


def mostly_fell_back(fallbacks: Mapping[str, int], sent: int) -> str:
    """What a run whose grading fell back on more than half of the groups sent to the grader trained as, in a phrase
    (empty when half or fewer fell back): those groups kept their verifier rewards, plain GRPO.

    Example:
        >>> mostly_fell_back({"unreachable": 100, "timeout": 11}, 146)
        'mostly as plain GRPO: 111 of 146 groups sent to the grader fell back (76%: timeout x11, unreachable x100)'
    """
    fell = sum(fallbacks.values())
    if not sent or fell * 2 <= sent:
        return ""
    kinds = ", ".join(f"{kind} x{count}" for kind, count in sorted(fallbacks.items()))
    return f"mostly as plain GRPO: {fell} of {sent} groups sent to the grader fell back ({fell / sent:.0%}: {kinds})"
