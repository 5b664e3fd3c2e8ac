"""The spread gate's controls: does the grader read the rollouts, or their positions?

A spread of scores alone cannot tell a grader that reads content from one that reads the order it is shown: ranking
the passes in the order given has a spread of 0.25 by construction, and an LLM judge's position bias is exactly that.
Two controls, graded with the same grader on the same groups:

- **Reordering.** The group is shown again with its members shuffled (seeded) and relabeled, so a grader keyed to
  the list position or to the index number sees a different "first". Kendall's tau-b between the two gradings of the
  passes (a confirmed hack counts as the lowest score) says whether the ranking survived; the gate wants the mean
  over groups at least ``min_agreement``.
- **Identical passes.** The reordered group carries one more member, a byte-identical copy of one of its passes. A
  grader that reads content must give the copy what it gives the original (the same factor, or both a hack); the gate
  wants the copies ordered in at most ``max_ordered_copies`` of the controls. A rule that never returns ties fails
  here, on purpose: it orders what it cannot tell apart, by position.

One extra grader call per control group (a judge answers a repeated check from its cache). This module builds the
control groups and scores the outcome; ``whileai.grading.gate`` grades them and turns the figures into the verdict.
No I/O.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from whileai.defaults import SPREAD_MAX_ORDERED_COPIES, SPREAD_MIN_AGREEMENT

__all__ = ["ControlGroup", "ControlsReport", "controls_report", "kendall_tau", "make_control"]


def kendall_tau(first: Mapping[int, float], second: Mapping[int, float]) -> float | None:
    """Kendall's tau-b between two scorings of the same items (ties allowed), over the items both hold.

    Returns None when it is undefined (fewer than two items, or one scoring ties everything).

    Example:
        >>> kendall_tau({0: 1, 1: 2, 2: 3}, {0: 1, 1: 2, 2: 3}), kendall_tau({0: 1, 1: 2}, {0: 2, 1: 1})
        (1.0, -1.0)
    """
    items = sorted(set(first) & set(second))
    concordant = discordant = tied_first = tied_second = 0
    for a, b in itertools.combinations(items, 2):
        x = first[a] - first[b]
        y = second[a] - second[b]
        if x == 0:
            tied_first += 1
        if y == 0:
            tied_second += 1
        if x * y > 0:
            concordant += 1
        elif x * y < 0:
            discordant += 1
    pairs = len(items) * (len(items) - 1) // 2
    denominator = math.sqrt((pairs - tied_first) * (pairs - tied_second))
    if denominator == 0:
        return None
    return (concordant - discordant) / denominator


@dataclass(frozen=True)
class ControlGroup:
    """A group shown again: members shuffled and relabeled, plus a copy of one pass.

    Attributes:
        members: ``members[k]`` is the original index of the control's member ``k``; the copy is the original
            ``copied`` again.
        copy: the control index of the copy.
        original: the control index of the member it copies.
    """

    members: list[int]
    copy: int
    original: int

    def back(self, scores: Mapping[int, float]) -> dict[int, float]:
        """Scores by control index -> scores by original index (the copy left out)."""
        return {self.members[k]: s for k, s in scores.items() if k != self.copy}


def make_control(size: int, passes: Sequence[int], seed: str) -> ControlGroup:
    """The control of a group of ``size`` whose passes are ``passes`` (at least one): a seeded shuffle that moves
    every position it can (a group of two is swapped), with a copy of a seeded pass at a seeded place.

    Example:
        >>> control = make_control(4, [0, 1], seed="refund-17")
        >>> sorted(control.members), control.members[control.copy] == control.members[control.original]
        ([0, 0, 1, 2, 3], True)
    """
    rng = random.Random(seed)
    order = list(range(size))
    for _ in range(20):  # a shuffle that is not the identity, where one exists
        rng.shuffle(order)
        if size < 2 or order != list(range(size)):
            break
    copied = rng.choice(list(passes))
    where = rng.randrange(size + 1)
    members = [*order[:where], copied, *order[where:]]
    original = next(k for k, m in enumerate(members) if m == copied and k != where)
    return ControlGroup(members, where, original)


@dataclass
class ControlsReport:
    """What the controls found, with the thresholds the gate applies.

    Attributes:
        taus: Kendall's tau per control group where it is defined (the original grading ordered two passes).
        copies: for each control group, whether the copy got the same score as its original.
        failed: control groups whose grading fell back (not counted above).
        min_agreement: the lowest mean tau that passes.
        max_ordered_copies: the largest fraction of ordered copies that passes.
    """

    taus: list[float] = field(default_factory=list)
    copies: list[bool] = field(default_factory=list)
    failed: int = 0
    min_agreement: float = SPREAD_MIN_AGREEMENT
    max_ordered_copies: float = SPREAD_MAX_ORDERED_COPIES

    @property
    def agreement(self) -> float | None:
        """Mean Kendall's tau between the two gradings; None without a defined tau."""
        return sum(self.taus) / len(self.taus) if self.taus else None

    @property
    def ordered_copies(self) -> float | None:
        """Fraction of controls whose identical copy got a different score; None without controls."""
        return sum(not tied for tied in self.copies) / len(self.copies) if self.copies else None

    @property
    def follows_position(self) -> bool:
        """The ranking does not survive reordering."""
        return self.agreement is not None and self.agreement < self.min_agreement

    @property
    def orders_copies(self) -> bool:
        """Identical passes were told apart."""
        return self.ordered_copies is not None and self.ordered_copies > self.max_ordered_copies

    @property
    def ok(self) -> bool:
        return not (self.follows_position or self.orders_copies)

    @property
    def line(self) -> str:
        """The figures, one line under the verdict."""
        if self.agreement is None:
            reorder = "agreement under reordering: no group with two passes to compare"
        else:
            reorder = (
                f"agreement under reordering tau {self.agreement:.2f} (n={len(self.taus)} groups, at least "
                f"{self.min_agreement:.2f} needed)"
            )
        if self.ordered_copies is None:
            copies = "identical passes: no control"
        else:
            tied = sum(self.copies)
            copies = (
                f"identical passes tied in {tied} of {len(self.copies)} controls "
                f"(at most {self.max_ordered_copies:.0%} may differ)"
            )
        failed = f"; {self.failed} control(s) fell back" if self.failed else ""
        return f"controls: {reorder}; {copies}{failed}"

    @property
    def why(self) -> str:
        """Why the controls fail, and what to change (empty when they pass)."""
        parts = []
        if self.follows_position:
            parts.append(
                f"the grader's ranking does not survive reordering (tau {self.agreement:.2f}, at least "
                f"{self.min_agreement:.2f} needed): it follows the position of the rollouts, not their content. Show "
                "them in a shuffled order, or for a judge use permutations >= 2"
            )
        if self.orders_copies:
            parts.append(
                f"identical passes got different scores in {sum(not t for t in self.copies)} of "
                f"{len(self.copies)} controls: the grader orders what it cannot tell apart. Return a tie (an inner "
                "list in the ranking) for passes that do not differ"
            )
        return "; and ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "agreement_tau": self.agreement,
            "agreement_groups": len(self.taus),
            "identical_copies": len(self.copies),
            "identical_copies_ordered": sum(not t for t in self.copies),
            "failed": self.failed,
            "thresholds": {"min_agreement": self.min_agreement, "max_ordered_copies": self.max_ordered_copies},
            "ok": self.ok,
        }


def controls_report(
    outcomes: Sequence[tuple[Mapping[int, float], Mapping[int, float], ControlGroup] | None],
    *,
    min_agreement: float = SPREAD_MIN_AGREEMENT,
    max_ordered_copies: float = SPREAD_MAX_ORDERED_COPIES,
) -> ControlsReport:
    """The controls' figures from ``(first scores by original index, control scores by control index, control)`` per
    control group (None for one that fell back). A score is the factor of a kept pass, 0 for a confirmed hack.

    Example:
        >>> control = ControlGroup(members=[1, 0, 1, 2], copy=2, original=0)
        >>> report = controls_report([({0: 0.5, 1: 1.0}, {0: 1.0, 1: 0.5, 2: 1.0}, control)])
        >>> report.agreement, report.ordered_copies
        (1.0, 0.0)
    """
    report = ControlsReport(min_agreement=min_agreement, max_ordered_copies=max_ordered_copies)
    for outcome in outcomes:
        if outcome is None:
            report.failed += 1
            continue
        first, second, control = outcome
        tau = kendall_tau(first, control.back(second))
        if tau is not None:
            report.taus.append(tau)
        if control.copy in second and control.original in second:
            report.copies.append(math.isclose(second[control.copy], second[control.original], abs_tol=1e-9))
    return report
