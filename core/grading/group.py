"""One group of rollouts on its way through grading: its record, and what its grader reads.

- ``GradedGroup``: a group after grading (rewards, passes, factors, hacks, scores, the shaped rewards TRL receives,
  why it fell back), and back from its line in ``grading.jsonl``;
- ``new_group`` and ``widen``: a group whose verifier could not score some members is graded on the others and
  returned at its full size;
- ``OpenedGroup``: a group sent to the grader, its texts rendered on demand;
- ``failure_kind``, ``failure_reason``: how a grader's exception is counted and said.

No grader is called here and no advantage computed (``whileai.grading.groupwise`` does both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from whileai.errors import describe
from whileai.grading.calls import GraderTimeout
from whileai.rows.rewards import scorable_members
from whileai.rows.text import completion_text, prompt_text

__all__ = [
    "GradedGroup",
    "OpenedGroup",
    "describe",
    "failure_kind",
    "failure_reason",
    "grade_request",
    "new_group",
    "pass_scores",
    "widen",
]

Mode = Literal["advantage", "reward"]


@dataclass
class GradedGroup:
    """One group after grading.

    Attributes:
        task_id: the group's task (scenario id, or the prompt when none is given).
        rewards: R_i from the verifier.
        passed: whether each member passed the verifier.
        effective_rewards: the rewards with each confirmed hack given a failure's reward (``hack_rewards``; equal to
            ``rewards`` otherwise).
        shaped: what the trainer receives: ``A'_i + mean(effective R)`` in advantage mode, equation 2 in reward mode,
            the original rewards when the group fell back or was not graded.
        factors: quality factor by index (advantage mode).
        hacks: confirmed hacks (advantage mode).
        scores: the grader's scores used by the spread gate (factors of the kept passes, or S_sol * S_beh).
        lam: lambda of equation 3 (advantage mode, 1.0 otherwise).
        graded: whether the grader was called.
        reason: why the group fell back, or None.
        failure: the kind of that reason, for counting: the exception's type, a judge call's kind (``"http 429"``,
            ``"timeout"``), ``"unusable answer"``, ``"grader timed out"``, ...
        unscorable: members the verifier could not score (None, NaN, inf, beyond float32). They are NaN in
            ``rewards`` and ``shaped``, never passes, and left out of everything else: the grader reads the others,
            and TRL leaves a NaN member out of its group's mean and gives it advantage 0.
        error: the exception behind the reason, when there was one.
        seconds: time spent in the grader.
        phase: ``"train"``, or ``"eval"`` for a group of TRL's evaluation batches.
        grader_calls: calls made to the grader for this group (one in advantage mode, one per pass in reward mode).
        label: the group's name in TRL's completion logs (``whileai_group``), when TRL graded it.
    """

    task_id: str
    rewards: list[float]
    passed: list[bool]
    effective_rewards: list[float]
    shaped: list[float]
    factors: dict[int, float] = field(default_factory=dict)
    hacks: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    lam: float = 1.0
    capped: bool = False
    graded: bool = False
    reason: str | None = None
    seconds: float = 0.0
    phase: str = "train"
    failure: str | None = None
    error: BaseException | None = field(default=None, repr=False, compare=False)
    redistributed: list[float] | None = field(default=None, repr=False)
    unscorable: int = 0
    grader_calls: int = 0
    label: str | None = None

    def fail(self, failure: str, reason: str, error: BaseException | None = None) -> None:
        """Record why the group falls back: its kind (``"ZeroDivisionError"``, ``"http 429"``, ``"unusable answer"``,
        ...), the one-line reason, and the exception when there was one (for ``--debug``)."""
        self.failure, self.reason, self.error = failure, reason, error

    @property
    def mixed(self) -> bool:
        """A pass and a failure among the scorable members."""
        scored = [ok for ok, r in zip(self.passed, self.rewards, strict=True) if r == r]  # NaN: unscorable
        return any(scored) and not all(scored)

    @property
    def advantages(self) -> list[float]:
        """The advantages the trainer forms from ``shaped`` by group-mean subtraction (A'_i of equation 3), 0 for an
        unscorable member as TRL gives it."""
        if self.redistributed is not None:
            return list(self.redistributed)
        finite = [s for s in self.shaped if math.isfinite(s)]
        mean = sum(finite) / len(finite) if finite else 0.0
        return [s - mean if math.isfinite(s) else 0.0 for s in self.shaped]

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "rewards": self.rewards,
            "passed": self.passed,
            "shaped": self.shaped,
            "factors": {str(k): v for k, v in sorted(self.factors.items())},
            "hacks": self.hacks,
            "scores": self.scores,
            "lambda": self.lam,
            "graded": self.graded,
            "reason": self.reason,
            "failure": self.failure,
            "seconds": self.seconds,
            "phase": self.phase,
            "unscorable": self.unscorable,
            "grader_calls": self.grader_calls,
            "group": self.label,
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> GradedGroup:
        """A group back from its ``as_dict`` record (a line of ``grading.jsonl``)."""
        rewards = [float(r) for r in record["rewards"]]
        group = cls(
            str(record["task_id"]),
            rewards,
            [bool(p) for p in record["passed"]],
            list(rewards),
            [float(s) for s in record["shaped"]],
        )
        group.factors = {int(k): float(v) for k, v in record.get("factors", {}).items()}
        group.hacks = [int(i) for i in record.get("hacks", [])]
        group.scores = [float(s) for s in record.get("scores", [])]
        group.lam = float(record.get("lambda", 1.0))
        group.graded = bool(record.get("graded"))
        group.reason, group.failure = record.get("reason"), record.get("failure")
        group.seconds = float(record.get("seconds", 0.0))
        group.phase = str(record.get("phase", "train"))
        group.unscorable = int(record.get("unscorable", 0))
        group.grader_calls = int(record.get("grader_calls", 0))
        group.label = record.get("group")
        return group


def failure_kind(exc: BaseException) -> str:
    """How a grader call failed, for counting: ``"grader timed out"``, the exception's own ``kind`` when it names one
    (a judge call's ``"http 429"``, ``"timeout"``, ``"connection"``, ``"unusable answer"``), else its type's name.

    Example:
        >>> failure_kind(ZeroDivisionError("division by zero"))
        'ZeroDivisionError'
    """
    if isinstance(exc, GraderTimeout):
        return "grader timed out"
    kind = getattr(exc, "kind", None)
    return kind if isinstance(kind, str) and kind else type(exc).__name__


def pass_scores(group: GradedGroup, mode: Mode) -> dict[int, float]:
    """The grader's score of each pass of a graded group, by index: its factor (1 when the answer left it out), 0
    for a confirmed hack (advantage mode); S_sol * S_beh (reward mode)."""
    passes = [i for i, ok in enumerate(group.passed) if ok]
    if mode == "reward":
        return dict(zip(passes, group.scores, strict=False))
    return {i: 0.0 if i in group.hacks else group.factors.get(i, 1.0) for i in passes}


def failure_reason(exc: BaseException) -> str:
    """A fallback reason for a grader call that raised or ran over its time limit."""
    if isinstance(exc, GraderTimeout):
        return f"grader timed out: {exc}"
    return f"grader raised: {describe(exc)}"


def new_group(
    task: str,
    values: list[float],
    passed: Sequence[bool] | None,
    prompts: Sequence[Any],
    completions: Sequence[Any],
) -> tuple[GradedGroup, Sequence[Any], Sequence[Any], list[int] | None]:
    """The record of one group, with the prompts and completions its grader reads.

    A member the verifier could not score (NaN: ``verifier_reward``) is left out: TRL leaves it out of the group's
    mean and gives it advantage 0, so the group is graded on its scorable members alone, and their positions come
    back as the fourth value for :func:`widen`. A group with one unscorable member in eight is still graded.
    """
    size = len(values)
    members = scorable_members(values)
    if members is not None:
        values = [values[i] for i in members]
        prompts = [prompts[i] for i in members]
        completions = [completions[i] for i in members]
        passed = None if passed is None else [passed[i] for i in members]
    ok = [r > 0 for r in values] if passed is None else [bool(p) for p in passed]
    group = GradedGroup(task, values, ok, values[:], values[:])
    group.unscorable = size - len(values)
    return group, prompts, completions, members


def widen(group: GradedGroup, members: list[int], rewards: list[float]) -> GradedGroup:
    """A group graded on its scorable ``members`` back at its full size: its unscorable members NaN in ``rewards``,
    ``effective_rewards`` and ``shaped``, never passes, advantage 0, and every index the grader named mapped back."""
    n = len(rewards)

    def placed(values: Sequence[Any], fill: Any) -> list[Any]:
        full = [fill] * n
        for position, value in zip(members, values, strict=True):
            full[position] = value
        return full

    group.rewards = placed(group.rewards, math.nan)
    group.passed = placed(group.passed, False)
    group.effective_rewards = placed(group.effective_rewards, math.nan)
    group.shaped = placed(group.shaped, math.nan)
    group.factors = {members[i]: f for i, f in group.factors.items()}
    group.hacks = [members[i] for i in group.hacks]
    if group.redistributed is not None:
        group.redistributed = placed(group.redistributed, 0.0)
    return group


def member_items(
    prompts: Sequence[str], completions: Sequence[str], rewards: Sequence[float], passed: Sequence[bool]
) -> list[dict[str, Any]]:
    """What an advantage-mode grader is handed for one group (reward mode hands it the passes one by one)."""
    return [
        {"index": i, "prompt": prompt, "completion": completion, "reward": reward, "passed": ok}
        for i, (prompt, completion, reward, ok) in enumerate(zip(prompts, completions, rewards, passed, strict=True))
    ]


class OpenedGroup:
    """A group on its way to the grader: its record and what the grader may read, rendered to text on demand.

    ``rendered`` says whether ``prompts`` and ``completions`` are what the grader reads already (the spread gate's
    rows, ``grade_group``'s arguments) or TRL's batch, possibly lists of messages, read as text only when the group is
    sent.
    """

    __slots__ = ("completions", "group", "prompts", "rendered")

    def __init__(self, group: GradedGroup, prompts: Sequence[Any], completions: Sequence[Any], rendered: bool) -> None:
        self.group, self.prompts, self.completions, self.rendered = group, prompts, completions, rendered

    def items(self) -> list[dict[str, Any]]:
        """The members as a plain grader reads them."""
        if self.rendered:
            return member_items(self.prompts, self.completions, self.group.rewards, self.group.passed)
        prompts = [prompt_text(p) for p in self.prompts]
        return member_items(
            prompts, [completion_text(c) for c in self.completions], self.group.rewards, self.group.passed
        )


def grade_request(task: str, members: Sequence[tuple[float, str, Any]]) -> tuple[Any, ...]:
    """The request ``GroupwiseGrading.grade_many`` takes for one group of ``(reward, prompt, completion)`` members:
    ``(rewards, prompts, completions, task_id, passed, send)``, the passes read from the rewards, the group sent."""
    return ([m[0] for m in members], [m[1] for m in members], [m[2] for m in members], task, None, True)
