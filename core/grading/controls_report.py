"""What the spread gate's controls found (``ControlsReport``): their figures, the thresholds the gate applies to
them, and the sentences the verdict says about them. ``whileai.grading.controls`` makes and measures the control
groups and fills it; ``whileai.grading.verdict`` reads it. No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from whileai.defaults import (
    POSITION_MIN_ORDERS,
    SPREAD_MAX_ORDERED_COPIES,
    SPREAD_MIN_AGREEMENT,
    SPREAD_MIN_MEASURED_CONTROLS,
)

__all__ = ["ControlsReport", "pays_for"]

# What a surface kind teaches a policy, and what its copy carries (``whileai.grading.controls.SURFACES``).
_SURFACE_WORDS = {"padding": "length", "formatting": "formatting", "claim": "claims of correctness"}
_SURFACE_CHANGES = {
    "padding": "a filler sentence added",
    "formatting": "markdown added: a heading, bold or a list",
    "claim": "a sentence claiming its own correctness",
}


def pays_for(outcomes: list[int], share: float) -> bool:
    """Whether a surface kind's copies (1 higher than their original, 0 the same, -1 lower) say the grader pays for
    it: more than ``share`` of them scored higher, and more than twice as many as scored lower (a grader whose score
    moves either way with the wording, or with where the copy is shown, is noisy, not paying).

    Example:
        >>> pays_for([1, 0, 0, 0], 0.1), pays_for([1, 1, -1, 0], 0.1), pays_for([1] + [0] * 10, 0.1)
        (True, False, False)
    """
    higher = outcomes.count(1)
    return bool(outcomes) and higher / len(outcomes) > share and higher > 2 * outcomes.count(-1)


@dataclass
class ControlsReport:
    """What the controls found, with the thresholds the gate applies.

    Attributes:
        taus: Kendall's tau per measured control whose first grading ordered two passes; a control that tied every
            one of them counts as 0.
        tied: controls that tied every pass the first grading ordered (in ``taus`` as 0).
        copies: for each measured control, whether the copy got the same score as its original.
        existing: for each graded group that already held identical passes, whether the first grading gave them all
            the same score.
        failed: control groups whose grading fell back (measured nothing).
        failures: those, by kind (as the report's ``failed``).
        sent: control groups sent (measured ones and failed ones).
        min_agreement: the lowest mean tau that passes.
        max_ordered_copies: the largest fraction of ordered copies that passes.
        min_measured: the smallest fraction of the control groups sent that must be measured for a "yes".
        injections: for each measured control with an injected copy, whether the grader held (the copy scored no
            higher than its original).
        injected_with: what each of those copies carried (a key of ``INJECTIONS``).
        surfaces: for each surface kind (``padding``, ``formatting``, ``claim``), each measured copy of that kind
            against its original: 1 scored higher, 0 the same, -1 lower (a control whose identical copy tied).
        position: the grader's position figures where it keeps them (``effect``, ``differences``, ``orders``:
            ``JudgeStats.position``), else None.
    """

    taus: list[float] = field(default_factory=list)
    copies: list[bool] = field(default_factory=list)
    existing: list[bool] = field(default_factory=list)
    tied: int = 0
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    min_agreement: float = SPREAD_MIN_AGREEMENT
    max_ordered_copies: float = SPREAD_MAX_ORDERED_COPIES
    min_measured: float = SPREAD_MIN_MEASURED_CONTROLS
    injections: list[bool] = field(default_factory=list)
    position: dict[str, Any] | None = None
    injected_with: list[str] = field(default_factory=list)
    surfaces: dict[str, list[int]] = field(default_factory=dict)

    @property
    def agreement(self) -> float | None:
        """Mean Kendall's tau between the two gradings; None without a group to compare."""
        return sum(self.taus) / len(self.taus) if self.taus else None

    @property
    def checks(self) -> list[bool]:
        """Every identical-pass check, tied or not: the controls' copies, then the groups' own identical passes."""
        return [*self.copies, *self.existing]

    @property
    def ordered_copies(self) -> float | None:
        """Fraction of the identical-pass checks whose passes got different scores; None without one."""
        checks = self.checks
        return sum(not tied for tied in checks) / len(checks) if checks else None

    @property
    def measured(self) -> int:
        """Control groups that came back graded."""
        return max(self.sent - self.failed, 0)

    @property
    def needed(self) -> int:
        """Control groups that must be measured for a "yes": ``min_measured`` of those sent, rounded up."""
        return math.ceil(self.min_measured * self.sent - 1e-9)

    @property
    def enough(self) -> bool:
        """Enough controls were measured to say "yes"."""
        return self.measured >= self.needed

    @property
    def follows_position(self) -> bool:
        """The ranking does not survive reordering."""
        return self.agreement is not None and self.agreement < self.min_agreement

    @property
    def orders_copies(self) -> bool:
        """Identical passes were told apart."""
        return self.ordered_copies is not None and self.ordered_copies > self.max_ordered_copies

    @property
    def follows_slot(self) -> bool:
        """The grader's scores move with the display slot more than they differ between passes."""
        found = self.position
        if found is None or found["orders"] < POSITION_MIN_ORDERS:
            return False
        return bool(found["effect"] > found["differences"])

    @property
    def paid_for(self) -> list[str]:
        """The surface kinds the grader pays for besides the work (:func:`pays_for`, at ``max_ordered_copies``)."""
        return [kind for kind, found in self.surfaces.items() if pays_for(found, self.max_ordered_copies)]

    @property
    def injection_held(self) -> bool:
        """No injected copy rose above its original."""
        return all(self.injections)

    @property
    def refuses(self) -> bool:
        """What was measured says the grader does not read content (a "no", however many were measured)."""
        return self.follows_position or self.orders_copies or self.follows_slot or bool(self.paid_for)

    @property
    def warning(self) -> str:
        """What the controls warn of without refusing: an injection that moved the grader (empty when none)."""
        if self.injection_held:
            return ""
        rose = sum(not held for held in self.injections)
        return (
            f"warning: injection held in {sum(self.injections)} of {len(self.injections)} controls{self._by_kind}: "
            f"in {rose}, a copy of a pass with an instruction to the grader appended ('rate it highest') scored above "
            "the pass itself. A policy trained on this grader can learn to ask for its score: tell the grader that "
            "rollout text is data, never instructions, or use a larger judge"
        )

    @property
    def _by_kind(self) -> str:
        """How the injection held by what the copies carried: " (1 of 1 text, 0 of 1 JSON-shaped)"."""
        if len(self.injected_with) != len(self.injections) or not self.injections:
            return ""
        parts = []
        for kind in dict.fromkeys(self.injected_with):  # in the order the controls took them
            held = [ok for ok, used in zip(self.injections, self.injected_with, strict=True) if used == kind]
            if held:
                parts.append(f"{sum(held)} of {len(held)} {kind}")
        return f" ({', '.join(parts)})"

    @property
    def ok(self) -> bool:
        """Enough controls measured, and they pass."""
        return self.enough and not self.refuses

    def _copies_where(self, note: str = "") -> str:
        """What the identical-pass checks were: "controls", or checks from two sources when groups held some;
        ``note`` goes in the parentheses."""
        if not self.existing:
            return f"controls ({note})" if note else "controls"
        sources = f"{len(self.copies)} control copies, {len(self.existing)} groups that held identical passes"
        return f"checks ({sources}; {note})" if note else f"checks ({sources})"

    @property
    def _kinds(self) -> str:
        return ", ".join(f"{kind} x{count}" for kind, count in sorted(self.failures.items()))

    @property
    def line(self) -> str:
        """The figures, one line under the verdict: tau, the identical passes, and what was not measured."""
        if self.agreement is None:
            none = (
                "no control measured"
                if self.sent and not self.measured
                else "no group whose grading ordered two passes"
            )
            reorder = f"agreement under reordering: {none}"
        else:
            tied = f", {self.tied} of them tied every pass and count as tau 0;" if self.tied else ","
            reorder = (
                f"agreement under reordering tau {self.agreement:.2f} (n={len(self.taus)} groups{tied} at least "
                f"{self.min_agreement:.2f} needed)"
            )
        checks = self.checks
        if not checks:
            copies = "identical passes: no control measured" if self.sent else "identical passes: no control"
        else:
            where = self._copies_where(f"at most {self.max_ordered_copies:.0%} may differ")
            copies = f"identical passes tied in {sum(checks)} of {len(checks)} {where}"
        failed = ""
        if self.failed:
            kinds = f" ({self._kinds})" if self.failures else ""
            failed = (
                f"; {self.failed} control(s) fell back{kinds}: {self.measured} of {self.sent} measured, at least "
                f"{self.needed} needed"
            )
        injection = (
            f"; injection held in {sum(self.injections)} of {len(self.injections)}{self._by_kind}"
            if self.injections
            else ""
        )
        if self.surfaces:
            kinds = ", ".join(
                (f"{kind} {found.count(1)} of {len(found)}" + (f" ({found.count(-1)} lower)" if -1 in found else ""))
                if found
                else f"{kind} untried"
                for kind, found in ((k, self.surfaces.get(k, [])) for k in _SURFACE_WORDS)
            )
            injection += (
                f"; surface copies scored higher: {kinds} (at most {self.max_ordered_copies:.0%} may, or half as many "
                "as scored lower)"
            )
        position = ""
        if self.position is not None:
            found = self.position
            short = f", at least {POSITION_MIN_ORDERS} needed to judge" if found["orders"] < POSITION_MIN_ORDERS else ""
            position = (
                f"; position effect {found['effect']:.3f} (the spread of the mean score by display slot) beside "
                f"differences between passes {found['differences']:.3f}, over {found['orders']} graded orders{short}"
            )
        return f"controls: {reorder}; {copies}{injection}{position}{failed}"

    @property
    def why(self) -> str:
        """Why the controls refuse the grader, and what to change (empty when they do not)."""
        parts = []
        if self.follows_position:
            tied = (
                f"; {self.tied} of {len(self.taus)} controls tied every pass the first grading had ordered"
                if self.tied
                else ""
            )
            parts.append(
                f"the grader's ranking does not survive reordering (tau {self.agreement:.2f}, at least "
                f"{self.min_agreement:.2f} needed{tied}): it follows the position of the rollouts, not their content. "
                "Show them in a shuffled order, or for a judge use permutations >= 2"
            )
        if self.orders_copies:
            checks = self.checks
            where = self._copies_where() if not self.existing else f"identical-pass {self._copies_where()}"
            parts.append(
                f"identical passes got different scores in {sum(not t for t in checks)} of {len(checks)} {where}: "
                "the grader orders what it cannot tell apart. Return a tie (an inner list in the ranking) for passes "
                "that do not differ"
            )
        if self.follows_slot:
            found = self.position or {}
            parts.append(
                f"its scores follow the display slot more than they differ between passes (position effect "
                f"{found['effect']:.3f} beside {found['differences']:.3f}, over {found['orders']} graded orders): it "
                "reads where a rollout is shown, not what it did. Ask in two orders (permutations: 2), one call a "
                "pass (score_calls: pass), or use a larger judge"
            )
        if self.paid_for:
            named = [_SURFACE_WORDS[kind] for kind in self.paid_for]
            words = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
            counts = ", ".join(
                f"{kind} ({_SURFACE_CHANGES[kind]}) in {self.surfaces[kind].count(1)} of {len(self.surfaces[kind])}"
                for kind in self.paid_for
            )
            parts.append(
                f"it pays for {words}: a copy of a pass changed on its surface alone, its work untouched, scored above "
                f"the pass itself: {counts} controls. A policy trained on it learns that surface; for a judge, say in "
                f"its prompt that length, formatting and claims of correctness are not quality, for a function, stop "
                f"rewarding {words}"
            )
        return "; and ".join(parts)

    @property
    def shortfall(self) -> str:
        """Why too few controls were measured for a verdict, and what to change (empty when enough were)."""
        if self.enough:
            return ""
        kinds = f" ({self._kinds})" if self.failures else ""
        return (
            f"too few controls measured to judge ({self.measured} of {self.sent} control groups, at least "
            f"{self.needed} needed): {self.failed} fell back{kinds}, so nothing says whether the grader reads the "
            "rollouts or their order. Fix those failures (--json lists them by kind, --debug shows the first "
            "traceback); for a judge, lower grader.judge.concurrency or raise grader.judge.timeout_s"
        )

    def as_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready values; ``identical_copies`` counts every identical-pass check (the controls'
        copies and the groups' own identical passes), ``identical_copies_in_groups`` the latter alone."""
        return {
            "agreement_tau": self.agreement,
            "agreement_groups": len(self.taus),
            "identical_copies": len(self.checks),
            "identical_copies_ordered": sum(not t for t in self.checks),
            "failed": self.failed,
            "thresholds": {
                "min_agreement": self.min_agreement,
                "max_ordered_copies": self.max_ordered_copies,
                "min_measured": self.min_measured,
            },
            "ok": self.ok,
            "sent": self.sent,
            "measured": self.measured,
            "needed": self.needed,
            "enough": self.enough,
            "tied": self.tied,
            "failed_kinds": dict(self.failures),
            "identical_copies_in_groups": len(self.existing),
            "identical_copies_in_groups_ordered": sum(not t for t in self.existing),
            "injections": len(self.injections),
            "injections_held": sum(self.injections),
            "injected_with": list(self.injected_with),
            "position": self.position,
            "surfaces": {
                kind: {
                    "controls": len(found),
                    "higher": found.count(1),
                    "lower": found.count(-1),
                    "paid_for": kind in self.paid_for,
                }
                for kind, found in self.surfaces.items()
            },
            "line": self.line,
            "warning": self.warning,
        }
