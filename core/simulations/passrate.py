"""Pass rates of graded rollouts, each with a 95% interval and its n.

:func:`score` groups rows by ``scenario_id`` and counts passes; :meth:`Scored.pass_at` gives the unbiased pass@k
estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on Code", equation 1), averaged over
scenarios, with an interval:

- ``pass@1``: a Wilson score interval on all samples pooled, ``n`` = the number of samples. It treats samples as
  independent, which they are not quite (samples of one scenario share its difficulty), so it is narrower than the
  bootstrap when scenarios differ a lot.
- ``pass@k``, ``k > 1``: a seeded percentile bootstrap over scenarios, ``n`` = the number of scenarios.

Printed as ``pass@1 0.62 (95% CI 0.55 to 0.69, n=160)``. The estimator and the intervals are the pure functions of
``whileai.stats`` (:func:`~whileai.stats.pass_at_k`, :func:`~whileai.stats.wilson_interval`,
:func:`~whileai.stats.bootstrap_interval`), importable from here too.

With a ``judge`` (the grader callable the reference page describes), :func:`score` also runs
``whileai.GroupwiseGrading(grader=judge).check_spread(rows, strict=False)`` and keeps its report.

What this module does not do: grade rollouts itself, hold the statistics (``whileai.stats``), or compare two arms (a
difference of pass rates needs a paired design the report command owns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from whileai.stats import BOOTSTRAP_RESAMPLES, bootstrap_interval, pass_at_k, wilson_interval

# pass_at_k and the two intervals are whileai.stats' and re-exported here, with the offline path they serve
# (``whileai.pass_at_k`` and ``whileai.wilson_interval`` resolve to this module).
__all__ = [
    "PassRate",
    "Scored",
    "bootstrap_interval",
    "pass_at_k",
    "score",
    "wilson_interval",
]


@dataclass(frozen=True)
class PassRate:
    """One pass@k figure with its interval and the n the interval is over.

    Attributes:
        k: the budget.
        estimate: the pass@k estimate, averaged over scenarios.
        low, high: the interval.
        n: samples (Wilson, k = 1) or scenarios (bootstrap, k > 1).
        n_of: ``"samples"`` or ``"scenarios"``.
        confidence: the interval's nominal coverage.
        method: ``"wilson"`` or ``"bootstrap"``.
    """

    k: int
    estimate: float
    low: float
    high: float
    n: int
    n_of: str
    confidence: float = 0.95
    method: str = "wilson"

    def __str__(self) -> str:
        level = f"{self.confidence * 100:g}%"
        return f"pass@{self.k} {self.estimate:.2f} ({level} CI {self.low:.2f} to {self.high:.2f}, n={self.n})"


@dataclass(frozen=True)
class Scored:
    """Rows counted per scenario, ready for pass@k; with a judge, the grader's spread report too.

    Attributes:
        counts: ``{scenario_id: (samples, passes)}`` in first-seen order.
        spread: the ``check_spread(strict=False)`` report when :func:`score` got a judge, else None.
    """

    counts: Mapping[str, tuple[int, int]]
    spread: Any = field(default=None, compare=False)

    @property
    def samples(self) -> int:
        """Rows counted."""
        return sum(n for n, _ in self.counts.values())

    @property
    def passes(self) -> int:
        """Rows that passed."""
        return sum(c for _, c in self.counts.values())

    def pass_at(
        self, k: int = 1, confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
    ) -> PassRate:
        """pass@k averaged over scenarios, with a Wilson interval (k = 1) or a bootstrap over scenarios (k > 1).

        Args:
            k: the budget; every scenario needs at least ``k`` samples.
            confidence: the interval's nominal coverage.
            resamples: bootstrap resamples (k > 1).
            seed: the bootstrap seed (k > 1).

        Example:
            >>> rows = [{"scenario_id": "a", "reward": r} for r in (1, 0, 1, 1)]
            >>> print(score(rows).pass_at(1))
            pass@1 0.75 (95% CI 0.30 to 0.95, n=4)
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if not self.counts:
            raise ValueError("no rows to score")
        short = [scenario_id for scenario_id, (n, _) in self.counts.items() if n < k]
        if short:
            raise ValueError(
                f"pass@{k} needs at least {k} samples per scenario; {len(short)} scenario(s) have fewer "
                f"(e.g. {short[0]!r} has {self.counts[short[0]][0]}). Simulate with n >= {k}."
            )
        per_scenario = [pass_at_k(n, c, k) for n, c in self.counts.values()]
        estimate = sum(per_scenario) / len(per_scenario)
        if k == 1:
            low, high = wilson_interval(self.passes, self.samples, confidence)
            return PassRate(1, estimate, low, high, self.samples, "samples", confidence, "wilson")
        low, high = bootstrap_interval(per_scenario, confidence=confidence, resamples=resamples, seed=seed)
        return PassRate(k, estimate, low, high, len(per_scenario), "scenarios", confidence, "bootstrap")

    def __str__(self) -> str:
        lines = [
            f"{self.samples} rollouts over {len(self.counts)} scenario(s), {self.passes} passed",
            str(self.pass_at(1)),
        ]
        if self.spread is not None:
            lines.append(str(self.spread))
        return "\n".join(lines)


def _passed(row: Mapping[str, Any]) -> bool:
    if "passed" in row and isinstance(row["passed"], bool):
        return row["passed"]
    reward = row.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise ValueError(f"row of scenario {row.get('scenario_id')!r} has no boolean 'passed' or numeric 'reward'")
    return reward > 0


def score(rows: Iterable[Mapping[str, Any]], judge: Callable[..., Any] | Any = None) -> Scored:
    """Count passes per scenario; with a judge, also check the grader's spread on the rows.

    A row passes when its ``passed`` is True or, without ``passed``, when its ``reward`` is above 0 (the rule
    ``check_spread`` uses).

    Args:
        rows: dicts with ``scenario_id`` and ``passed`` or ``reward``, e.g. from
            :func:`~whileai.simulations.rollouts.simulate`.
        judge: None, a grader callable (one group of ``{"index", "prompt", "completion", "reward", "passed"}`` in,
            ``{"ranking": [...], "hacks": [...]}`` out), or a ready ``GroupwiseGrading``.

    Returns:
        A :class:`Scored`; ``scored.pass_at(k)`` prints as ``pass@1 0.62 (95% CI 0.55 to 0.69, n=160)``.
    """
    rows = list(rows)
    counts: dict[str, tuple[int, int]] = {}
    for row in rows:
        if "scenario_id" not in row:
            raise ValueError("every row needs a 'scenario_id' to group samples by scenario")
        scenario_id = str(row["scenario_id"])
        n, c = counts.get(scenario_id, (0, 0))
        counts[scenario_id] = (n + 1, c + int(_passed(row)))
    spread = None
    if judge is not None:
        spread = _check_spread(rows, judge)
    return Scored(counts=counts, spread=spread)


def _check_spread(rows: list[Mapping[str, Any]], judge: Any) -> Any:
    """The grader's spread report on ``rows``, through ``whileai.GroupwiseGrading`` (imported only when needed)."""
    if hasattr(judge, "check_spread"):
        return judge.check_spread(rows, strict=False)
    from whileai.grading.groupwise import GroupwiseGrading

    return GroupwiseGrading(grader=judge).check_spread(rows, strict=False)
