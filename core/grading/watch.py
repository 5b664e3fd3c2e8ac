"""The spread gate kept watching while a run trains: is the grader still telling the policy's passes apart?

The gate refuses a grader before training, but what the grader sees changes as the policy learns: passes grow
alike (the scores stop varying and group normalization erases them, so GAR turns back into plain GRPO), a judge
server is swapped or degraded, a grader starts failing. :class:`SpreadWatch` checks the grading the run already does,
every ``every_steps`` optimizer steps, the way the gate checks:

- **spread**, on the groups graded over the last ``window`` steps (those with two passes or more, as the gate reads):
  the scores' std and the share within ``tolerance`` of their median, against the recipe's ``spread`` thresholds. No
  grader call: these are the scores training used;
- **controls**, on up to ``controls`` of the newest of those groups: shown to the grader again, shuffled and
  relabeled with a copy of one pass (``whileai.grading.controls``, a judge asked past its cache in reward mode),
  kept out of the run's counters and its rewards. These are the watch's only extra grader calls, and a check sends
  no more of them than keeps the run's extra calls within ``max_extra_calls`` of the grader calls training made;
- **broken**: groups that fell back, as a share of those attempted; and the confirmed hacks among the passes;
- **surface**: the passes' mean length (words), markup and claim phrases, with the mean within-group Kendall tau
  of the grader's scores with each: when a control finds the grader paying for a surface, the check says how far the
  passes moved on it since the first check while the pass rate moved.

A check's verdict is the gate's (``whileai.grading.verdict.spread_report``): ``yes``, ``no`` (no spread, or controls
that refuse), ``broken`` (the grader failing on ``broken_fraction`` of the groups) or ``too few`` (not enough scores or
controls to judge, which neither passes nor fails). ``no`` and ``broken`` fail. The policy: ``warn`` says what failed
once each time the verdict or what failed changes; ``stop`` also asks the run to stop, at a checkpoint, after
``patience`` failed checks in a row, with a message that says what changed since the last passing check.

Each check's figures come back as TRL metrics (``whileai/watch/*``) and as one record for the run folder's
``watch.jsonl`` (:class:`WatchLog` appends it). Stopping the trainer is the training run's (TRL) or the reward
manager's (verl).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.errors import BadInput
from whileai.grading.controls import SURFACE_FEATURES, ControlsTally, changed, surface_features
from whileai.grading.group import GradedGroup, pass_scores
from whileai.grading.knobs import WatchSettings
from whileai.grading.verdict import SpreadReport, spread_report
from whileai.stats import kendall_tau

__all__ = ["SpreadWatch", "WatchCheck", "WatchLog", "WatchSettings"]


@dataclass
class WatchCheck:
    """One check: its steps, verdict and figures, and where the policy stands after it."""

    step: int
    first_step: int
    verdict: str
    why: str
    rule: str | None
    figures: dict[str, float]
    failed_in_a_row: int
    controls_sent: int
    stop: bool = False
    paid_for: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.verdict in ("no", "broken")

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "steps": [self.first_step, self.step],
            "verdict": self.verdict,
            "failed": self.failed,
            "why": self.why,
            "rule": self.rule,
            "failed_in_a_row": self.failed_in_a_row,
            "controls_sent": self.controls_sent,
            "stop": self.stop,
            "paid_for": self.paid_for,
            **{name: (None if math.isnan(v) else v) for name, v in self.figures.items()},
        }


@dataclass
class _Seen:
    """A graded group kept for the window: its step, and what a control needs to show it again."""

    step: int
    key: str
    graded: GradedGroup
    prompts: Sequence[Any]
    completions: Sequence[Any]


@dataclass
class SpreadWatch:
    """The checks of one run (the module docstring).

    Args:
        grading: the run's ``GroupwiseGrading``: its grader answers the controls, its ``spread`` thresholds judge.
        settings: ``spread.watch``.
        say: where a failed check's message goes.
        on_check: called with each check's record (the run writes it to ``watch.jsonl``).
        seed: seeds the controls' shuffles (with the step).
        batches_per_step: how many graded batches make one step (TRL scores several when it generates more than once
            an optimizer step); a step is checked once all of them are in.

    Example:
        >>> from whileai.grading.groupwise import GroupwiseGrading
        >>> flat = GroupwiseGrading(grader=lambda group: {"factors": {g["index"]: 0.5 for g in group if g["passed"]}})
        >>> watch = SpreadWatch(flat, WatchSettings(every_steps=2, on_fail="stop", patience=1), say=print)
        >>> texts = ["a", "bb", "ccc", "x"]
        >>> for step in (1, 2):
        ...     graded = flat.grade_batch([1, 1, 1, 0], ["p"] * 4, texts, 4)
        ...     figures = watch.observe(step, graded, ["p"] * 4, texts, 4)
        whileai: the watch failed at step 2 (steps 1-2): spread: no. the scores' std 0.000 ... (on_fail: stop)
        >>> figures["whileai/watch/std"], watch.stop_requested
        (0.0, True)
    """

    grading: Any
    settings: WatchSettings = field(default_factory=WatchSettings)
    say: Callable[[str], None] = print
    on_check: Callable[[dict[str, Any]], None] | None = None
    seed: int = 0
    batches_per_step: int = 1  # graded batches that make up one step (TRL: generations per optimizer step)
    stop_requested: bool = False
    checks: list[WatchCheck] = field(default_factory=list)
    _seen: deque[_Seen] = field(default_factory=deque)
    _first_step: int = 1 << 62  # the first step whose groups it kept
    _calls: int = 0  # grader calls training made (what the controls' budget is a share of)
    _extra: int = 0  # controls sent
    _kept: int = 0  # groups kept so far, for keys that stay unique as old groups are let go
    _batches: dict[int, int] = field(default_factory=dict)  # graded batches seen of the latest step
    _last_told: tuple[str, str | None] | None = None
    _last_passed: WatchCheck | None = None
    _surfaces: dict[str, list[int]] = field(default_factory=dict)  # each kind's surface controls, latest check

    def observe(
        self, step: int, graded: Sequence[GradedGroup], prompts: Sequence[Any], completions: Sequence[Any], size: int
    ) -> dict[str, float]:
        """A training batch of ``step`` graded: :meth:`keep`, then :meth:`check_through` the step once
        ``batches_per_step`` of its batches are in, and before that the step before it (a batch of a later step
        completes every earlier one). Returns the check's TRL metrics, or {}."""
        self.keep(step, graded, prompts, completions, size)
        seen = self._batches.get(step, 0) + 1
        self._batches = {step: seen}
        return self.check_through(step if seen >= self.batches_per_step else step - 1)

    def keep(
        self, step: int, graded: Sequence[GradedGroup], prompts: Sequence[Any], completions: Sequence[Any], size: int
    ) -> None:
        """Keep a batch's graded groups of ``step`` for the checks (``prompts`` and ``completions`` the batch's,
        ``size`` a group's members)."""
        self._first_step = min(self._first_step, step)
        for index, group in enumerate(graded):
            self._calls += group.grader_calls
            members = slice(index * size, (index + 1) * size)
            key = f"{step}:{self._kept}:{group.task_id}"
            self._kept += 1
            self._seen.append(_Seen(step, key, group, prompts[members], completions[members]))

    def summary(self) -> dict[str, Any] | None:
        """What a run's record keeps of the checks so far (None before the first): how many, how many failed, the
        grader calls the last one's controls cost, and the last check."""
        if not self.checks:
            return None
        last = self.checks[-1]
        failed = sum(c.failed for c in self.checks)
        return {"checks": len(self.checks), "failed": failed, "extra_grader_calls": last.figures["extra_calls"],
                "last": last.as_dict()}  # fmt: skip

    def check_through(self, step: int) -> dict[str, float]:
        """Make the checks due by ``step``, a completed step: one at each multiple of ``every_steps`` not yet
        checked, on the groups of the ``window`` steps up to it. Returns the last check's TRL metrics, or {}."""
        every = self.settings.every_steps
        window = self.settings.window or every
        metrics: dict[str, float] = {}
        while True:
            # The next multiple of every_steps: after the last check, or after the steps before the first group
            # seen (a resumed run's watch starts at its checkpoint, with no empty checks of the steps before).
            done = self.checks[-1].step if self.checks else (self._first_step - 1) // every * every
            due = done + every
            while self._seen and self._seen[0].step <= due - window:  # before the next check's window
                self._seen.popleft()
            if step < due:
                return metrics
            check = self._check(due, max(1, due - window + 1))
            self.checks.append(check)
            self._tell(check)
            if self.on_check is not None:
                self.on_check(check.as_dict())
            metrics = {f"whileai/watch/{k}": v for k, v in check.figures.items() if not math.isnan(v)}
            metrics.update(
                {
                    "whileai/watch/failed": float(check.failed),
                    "whileai/watch/failed_in_a_row": float(check.failed_in_a_row),
                }
            )

    def note(self, metrics: dict[str, float]) -> None:
        """On a process that does not grade: take the stop decision from the metrics rank 0 logged."""
        streak = metrics.get("whileai/watch/failed_in_a_row")
        if streak is not None and self.settings.on_fail == "stop" and streak >= self.settings.patience:
            self.stop_requested = True

    def _check(self, step: int, first: int) -> WatchCheck:
        mode = self.grading.mode
        limits = self.grading.spread
        per_group: dict[str, list[float]] = {}
        failed: dict[str, int] = {}
        first_failures: dict[str, str] = {}
        hacks: dict[str, list[int]] = {}
        passes = hacked = members = 0
        eligible: list[_Seen] = []
        surface: dict[str, list[float]] = {name: [] for name in SURFACE_FEATURES.values()}
        taus: dict[str, list[float]] = {name: [] for name in surface}
        for seen in self._seen:
            if not first <= seen.step <= step:  # a later step's groups, kept for the next check
                continue
            group = seen.graded
            passes += sum(group.passed)
            members += sum(r == r for r in group.rewards)  # NaN: a member the verifier could not score
            hacked += len(group.hacks)
            measured = {i: surface_features(seen.completions[i]) for i, ok in enumerate(group.passed) if ok}
            for features in measured.values():
                for name, value in features.items():
                    surface[name].append(value)
            if sum(group.passed) < 2:  # what the gate skips: nothing for a grader to tell apart
                continue
            if group.reason is not None:
                kind = group.failure or group.reason.split(":", 1)[0]
                failed[kind] = failed.get(kind, 0) + 1
                first_failures.setdefault(kind, group.reason)
                continue
            per_group[seen.key] = list(group.scores)
            scores = pass_scores(group, mode)
            for name, found in taus.items():
                tau = kendall_tau(scores, {i: measured[i][name] for i in scores})
                if tau is not None:
                    found.append(tau)
            if group.hacks:
                hacks[seen.key] = list(group.hacks)
            eligible.append(seen)
        controls, sent = self._controls(step, eligible)
        if controls is not None:
            # A check's few controls try one kind or two: a kind this check did not try is judged as the last check
            # that tried it was, so a grader that pays for one surface fails every check until it stops.
            self._surfaces.update(controls.surfaces)
            controls.surfaces = dict(self._surfaces)
        report = spread_report(
            per_group,
            thresholds=limits,
            mode=mode,
            failed=failed,
            hacks=hacks,
            first_failures=first_failures,
            controls=controls,
        )
        figures = self._figures(report, failed, passes, hacked)
        figures["pass_rate"] = passes / members if members else math.nan
        for name, values in surface.items():
            figures[name] = sum(values) / len(values) if values else math.nan
            figures[f"{name}_tau"] = sum(taus[name]) / len(taus[name]) if taus[name] else math.nan
        before = self.checks[-1].failed_in_a_row if self.checks else 0
        # "too few" neither passes nor fails: a window too thin to judge leaves the count of failures in a row as is
        streak = {"no": before + 1, "broken": before + 1, "too few": before}.get(report.verdict, 0)
        why = f"{report.finding} ({len(report.scores)} scores in {report.groups} groups)"
        paid = [] if report.controls is None else report.controls.paid_for
        check = WatchCheck(step, first, report.verdict, why, report.rule, figures, streak, sent, paid_for=paid)
        if paid:
            check.why += "; " + self._trend(check)
        check.stop = check.failed and self.settings.on_fail == "stop" and streak >= self.settings.patience
        self.stop_requested = self.stop_requested or check.stop
        return check

    def _controls(self, step: int, eligible: list[_Seen]) -> tuple[Any, int]:
        """The controls of a check on the newest eligible groups, within the budget; (report or None, groups sent)."""
        budget = math.floor(self.settings.max_extra_calls * self._calls) - self._extra
        wanted = min(self.settings.controls, max(0, budget))
        tally = ControlsTally(wanted, self.grading.mode, seed=f"watch:{self.seed}:{step}", turn=self._extra)
        requests = []
        for seen in reversed(eligible):
            control = tally.see(seen.key, seen.graded, seen.completions)
            if control is None:
                continue
            requests.append(
                (
                    control.shown(seen.graded.rewards),
                    control.shown(seen.prompts),
                    control.shown(seen.completions, changed),
                    seen.graded.task_id,
                    None,
                    True,
                )
            )
        if requests:
            fresh = self.grading.mode == "reward"  # a pass scored alone is the same prompt again: past the cache
            tally.answered(self.grading.grade_many(requests, record=False, shape=False, fresh=fresh))
            self._extra += len(requests)
        if not requests and not tally.existing:
            return None, 0
        return tally.report(self.grading), len(requests)

    def _figures(self, report: SpreadReport, failed: dict[str, int], passes: int, hacked: int) -> dict[str, float]:
        controls = report.controls
        tied = math.nan
        if controls is not None and controls.checks:
            tied = sum(controls.checks) / len(controls.checks)
        attempted = report.groups + sum(failed.values())
        held = math.nan
        if controls is not None and controls.injections:
            held = sum(controls.injections) / len(controls.injections)
        position = controls.position if controls is not None else None
        return {
            "std": report.std if report.scores else math.nan,
            "near_median": report.near_median if report.scores else math.nan,
            "control_tau": math.nan if controls is None or controls.agreement is None else controls.agreement,
            "copies_tied": tied,
            "injection_held": held,
            "position_effect": math.nan if position is None else position["effect"],
            "pass_differences": math.nan if position is None else position["differences"],
            "fallback_rate": sum(failed.values()) / attempted if attempted else math.nan,
            "hack_rate": hacked / passes if passes else math.nan,
            "groups": float(report.groups),
            "extra_calls": float(self._extra),
            "grader_calls": float(self._calls),
        }

    def _trend(self, check: WatchCheck) -> str:
        """How far the passes moved on each surface the grader pays for since the first check, and how its scores
        go with it within groups."""
        base = self.checks[0] if self.checks else None
        parts = []
        for kind in check.paid_for:
            name = SURFACE_FEATURES[kind]
            was, now, tau = (base or check).figures[name], check.figures[name], check.figures[f"{name}_tau"]
            moved = f"{now / was - 1:+.0%}" if was > 0 else f"{0 if math.isnan(was) else was:.2f} -> {now:.2f} a pass"
            part = f"{name} {moved} since step {base.first_step}" if base is not None else f"{name} {now:.2f} a pass"
            parts.append(part + ("" if math.isnan(tau) else f" (its tau with the scores within groups {tau:+.2f})"))
        paid = ", ".join(SURFACE_FEATURES[k] for k in check.paid_for)
        if base is None:
            return f"the grader pays for {paid}: the passes' {', '.join(parts)}"
        rate = (check.figures["pass_rate"] - base.figures["pass_rate"]) * 100
        return (
            f"the grader pays for {paid}: the passes' {', '.join(parts)}, while the pass rate moved {rate:+.1f} points"
        )

    def _tell(self, check: WatchCheck) -> None:
        """Say a failed check once per change of verdict and of what failed (spread, controls, a broken grader),
        with where the figures were when it last passed; say when the watch passes after failing."""
        told = (check.verdict, check.rule)  # what failed, not its figures, which move every check
        if check.failed and (told != self._last_told or check.stop):
            since = ""
            good = self._last_passed
            if good is not None:
                moved = [
                    f"{name} {good.figures[name]:.2f} at step {good.step} -> {check.figures[name]:.2f}"
                    for name in ("std", "near_median", "control_tau", "fallback_rate")
                    if not math.isnan(good.figures[name]) and not math.isnan(check.figures[name])
                    and abs(good.figures[name] - check.figures[name]) >= 0.005
                ]  # fmt: skip
                since = f"; since the last passing check: {', '.join(moved)}" if moved else ""
            action = (
                "; stopping the run (on_fail: stop)"
                if check.stop
                else f" ({check.failed_in_a_row} in a row; on_fail: {self.settings.on_fail})"
            )
            self.say(
                f"whileai: the watch failed at step {check.step} (steps {check.first_step}-{check.step}): "
                f"{check.why}{since}{action}"
            )
        elif not check.failed and self._last_told is not None and self._last_told[0] in ("no", "broken"):
            self.say(f"whileai: the watch passed again at step {check.step}: {check.why}")
        if check.verdict != "too few":
            self._last_told = told
        if check.verdict == "yes":
            self._last_passed = check


class WatchLog:
    """Appends each check's record to a run's ``watch.jsonl`` (a resumed run continues the same file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not path.is_file():  # a pipe there would hold the run on its first write
            raise BadInput(f"{path} is no regular file (a pipe, a device or a folder?): remove it")

    def __call__(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
