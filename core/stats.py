"""The statistics whileai prints: quantiles, Student's t, intervals for proportions and means, pass@k.

Pure functions on plain numbers, written with the standard library alone (no numpy, no scipy, so that ``import
whileai`` and the command line stay light), each with its equation and its source:

- :func:`quantile`: the library's one quantile rule, linear interpolation between order statistics (Hyndman and Fan
  1996, definition 7; numpy's default). Latency percentiles and bootstrap bounds both use it.
- :func:`t_quantile`: Student's t quantile.
- :func:`wilson_interval`: a binomial proportion; :func:`clustered_interval`: a proportion of completions drawn in
  groups, each group a cluster; :func:`newcombe_difference`: the difference of two proportions from their intervals.
- :func:`t_interval`, :func:`welch_interval`, :func:`detectable_difference`: means over a few runs (seeds), paired
  or not, and the smallest difference such a design finds.
- :func:`bootstrap_interval`: a seeded percentile bootstrap over independent units.
- :func:`pass_at_k`: the unbiased pass@k estimate of one task.

What this module does not do: read files, decide what the unit of analysis is (groups, tasks, seeds: the callers in
``whileai.reports.runs``, ``whileai.reports.experiments`` and ``whileai.simulations.passrate`` do), format figures or
draw them (``whileai.reports.plots``). It imports nothing of whileai."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "ClusteredRate",
    "MeanInterval",
    "bootstrap_interval",
    "clustered_interval",
    "detectable_difference",
    "kendall_tau",
    "mean",
    "newcombe_difference",
    "pass_at_k",
    "quantile",
    "sample_std",
    "t_interval",
    "t_quantile",
    "welch_interval",
    "wilson_interval",
]

BOOTSTRAP_RESAMPLES = 2000  # enough for a stable 2.5th/97.5th percentile (Efron & Tibshirani 1993, ch. 13)


# ---------------------------------------------------------------- quantiles


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (``0 <= q <= 1``) by linear interpolation between order statistics.

    With the values sorted as ``x_0 <= ... <= x_{n-1}`` and ``h = q (n - 1)``, the quantile is
    ``x_floor(h) + (h - floor(h)) (x_floor(h)+1 - x_floor(h))`` (Hyndman and Fan 1996, "Sample quantiles in
    statistical packages", definition 7; numpy's default). It is the median at ``q = 0.5``, the smallest value at 0
    and the largest at 1.

    Args:
        values: the sample, in any order.
        q: the quantile's level; the 95th percentile is ``q = 0.95``.

    Returns:
        the quantile; NaN for no values.

    Example:
        >>> quantile([4.0, 1.0, 3.0, 2.0], 0.5)
        2.5
        >>> quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95)
        4.8
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile's level lies in [0, 1], got {q}")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def t_quantile(q: float, df: int) -> float:
    """Student's t quantile with ``df`` degrees of freedom.

    Exact for 1 and 2 degrees of freedom (``tan(pi (q - 1/2))`` and ``(2q - 1) / sqrt(2 q (1 - q))``), else the
    Cornish-Fisher expansion around the normal quantile of Abramowitz and Stegun (1964, 26.7.5), within 0.005 of the
    exact value from 3 degrees of freedom on at q = 0.975.

    Args:
        q: the level, ``0 < q < 1``.
        df: the degrees of freedom, at least 1.

    Example:
        >>> round(t_quantile(0.975, 1), 3), round(t_quantile(0.975, 2), 3), round(t_quantile(0.975, 10), 3)
        (12.706, 4.303, 2.228)
    """
    if df == 1:
        return math.tan(math.pi * (q - 0.5))
    if df == 2:
        return (2 * q - 1) / math.sqrt(2 * q * (1 - q))
    z = NormalDist().inv_cdf(q)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _z(confidence: float) -> float:
    """The normal quantile of a two-sided interval at ``confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def _t(q: float, df: float) -> float:
    """The t quantile at ``df`` rounded to a whole number (Welch's df is fractional), at least 1."""
    return t_quantile(q, max(1, round(df)))


# ---------------------------------------------------------------- proportions


def wilson_interval(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (Wilson 1927).

    center = (p + z²/2n) / (1 + z²/n), half-width = z / (1 + z²/n) * sqrt(p(1 - p)/n + z²/4n²), with p = successes/n.
    Unlike the normal approximation it stays inside [0, 1] and keeps its coverage near 0 and 1. The formula holds for
    a non-integer n, the effective sample size :func:`clustered_interval` hands it.

    Args:
        successes: passes.
        n: trials; ``n = 0`` gives the uninformative ``(0.0, 1.0)``.
        confidence: the interval's nominal coverage.

    Returns:
        ``(low, high)``.

    Example:
        >>> [round(x, 3) for x in wilson_interval(8, 10)]
        [0.49, 0.943]
    """
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n]; got {successes} of {n}")
    if n == 0:
        return (0.0, 1.0)
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # The bounds at 0 and n are exactly 0 and 1; floating point would leave them a few ulps off.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return (low, high)


@dataclass(frozen=True)
class ClusteredRate:
    """Passes among ``n`` completions drawn in ``groups`` groups, with an interval that treats each group as a
    cluster (:func:`clustered_interval`)."""

    passes: int
    n: int
    groups: int
    low: float
    high: float
    design_effect: float

    @property
    def rate(self) -> float:
        return self.passes / self.n if self.n else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "n": self.n,
            "groups": self.groups,
            "rate": self.rate,
            "low": self.low,
            "high": self.high,
            "design_effect": self.design_effect,
        }


def clustered_interval(groups: Sequence[tuple[int, int]], confidence: float = 0.95) -> ClusteredRate:
    """The pass rate of completions drawn in groups, with an interval that counts each group as a cluster.

    The completions of one group answer one prompt, so they pass or fail together more often than independent draws
    would. With ``k`` groups, ``y_i`` passes among ``m_i`` completions in group ``i``, ``n = sum m_i`` and
    ``p = sum y_i / n``:

    - the variance of ``p`` over clusters (the linearized variance of a ratio estimator, Cochran 1977, Sampling
      Techniques, chapter 6, with the k/(k-1) small-sample factor): ``V = k/(k-1) * sum (y_i - p m_i)^2 / n^2``;
    - the design effect ``deff = V / (p (1 - p) / n)``, at least 1 (an estimate below 1 from a few groups is noise);
      1 when ``p`` is 0 or 1, where V says nothing (Korn and Graubard 1998);
    - the effective sample size ``n / deff``, shrunk by ``(z / t_{k-1})^2`` so that few groups widen the interval as
      a t interval would (Korn and Graubard 1998, "Confidence intervals for proportions with small expected number
      of positive counts estimated from survey data", Survey Methodology 24(2));
    - Wilson's interval at ``p`` on that effective n (:func:`wilson_interval`; Korn and Graubard use
      Clopper-Pearson's, Dean and Pagano 2015 compare both on clustered surveys).

    With one group there is no between-group variance to estimate: the group counts as one draw (n_eff = 1), the
    widest the design allows. With independent draws (groups of one) the design effect is about 1 and the interval
    is close to Wilson's on all n.

    Args:
        groups: ``(passes, completions)`` per group, e.g. ``[(3, 8), (0, 8), (8, 8)]``; groups of no completion are
            left out.
        confidence: the interval's nominal coverage.

    Returns:
        a :class:`ClusteredRate`; with no completions the rate is NaN and the interval ``(0, 1)``.

    Example:
        >>> r = clustered_interval([(8, 8), (0, 8), (8, 8), (0, 8)])
        >>> r.rate, r.n, r.groups, round(r.design_effect, 2)
        (0.5, 32, 4, 10.67)
        >>> r.high - r.low > (lambda lo, hi: hi - lo)(*wilson_interval(16, 32))
        True
    """
    groups = [(int(y), int(m)) for y, m in groups if m > 0]
    k = len(groups)
    n = sum(m for _, m in groups)
    passes = sum(y for y, _ in groups)
    if n == 0:
        return ClusteredRate(0, 0, 0, 0.0, 1.0, 1.0)
    p = passes / n
    if k == 1:
        effective, deff = 1.0, float(n)
    else:
        deff = 1.0
        if 0 < p < 1:
            variance = k / (k - 1) * sum((y - p * m) ** 2 for y, m in groups) / n**2
            deff = max(1.0, variance / (p * (1 - p) / n))
        effective = n / deff * (_z(confidence) / t_quantile(0.5 + confidence / 2, k - 1)) ** 2
    low, high = wilson_interval(p * effective, effective, confidence)
    return ClusteredRate(passes, n, k, low, high, deff)


def newcombe_difference(a: tuple[float, float, float], b: tuple[float, float, float]) -> tuple[float, float, float]:
    """The difference ``b - a`` of two independent proportions with the interval Newcombe built from each one's own
    interval (Newcombe 1998, "Interval estimation for the difference between independent proportions: comparison of
    eleven methods", Statistics in Medicine 17, method 10).

    With estimates ``p_a, p_b`` and intervals ``(l_a, u_a), (l_b, u_b)`` and ``d = p_b - p_a``:
    ``low = d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2)``, ``high = d + sqrt((u_b - p_b)^2 + (p_a - l_a)^2)``. Any
    interval of each proportion can go in (Wilson's, a :func:`clustered_interval`).

    Args:
        a, b: ``(estimate, low, high)`` of each proportion.

    Returns:
        ``(difference, low, high)``.

    Example:
        >>> [round(x, 3) for x in newcombe_difference((0.5, 0.4, 0.6), (0.7, 0.6, 0.8))]
        [0.2, 0.059, 0.341]
    """
    p_a, low_a, high_a = a
    p_b, low_b, high_b = b
    difference = p_b - p_a
    low = difference - math.sqrt((p_b - low_b) ** 2 + (high_a - p_a) ** 2)
    high = difference + math.sqrt((high_b - p_b) ** 2 + (p_a - low_a) ** 2)
    return (difference, low, high)


# ---------------------------------------------------------------- means over a few runs


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean; NaN for no values.

    Example:
        >>> mean([0.5, 0.7, 0.6])
        0.6
    """
    return sum(values) / len(values) if len(values) else math.nan


def sample_std(values: Sequence[float]) -> float:
    """The sample standard deviation (divisor ``n - 1``); NaN below two values.

    Example:
        >>> sample_std([1.0, 2.0, 3.0])
        1.0
    """
    if len(values) < 2:
        return math.nan
    centre = mean(values)
    return math.sqrt(sum((v - centre) ** 2 for v in values) / (len(values) - 1))


@dataclass(frozen=True)
class MeanInterval:
    """A mean, or a difference of means, with its t interval.

    Attributes:
        estimate: the mean (or the difference).
        low, high: the interval, ``estimate -+ t_{(1+confidence)/2, df} * se``.
        se: the estimate's standard error.
        df: the degrees of freedom of its t quantile (Welch's are fractional; the quantile rounds them).
    """

    estimate: float
    low: float
    high: float
    se: float
    df: float


def t_interval(values: Sequence[float], confidence: float = 0.95) -> MeanInterval:
    """The mean of ``values`` with Student's t interval: ``mean -+ t_{(1+c)/2, n-1} * s / sqrt(n)``.

    For paired data, hand it the per-pair differences (a paired t interval).

    Args:
        values: one number per independent unit (a seed's final pass rate, say).
        confidence: the interval's nominal coverage.

    Returns:
        a :class:`MeanInterval` on ``n - 1`` degrees of freedom; NaN bounds below two values.

    Example:
        >>> r = t_interval([0.2, 0.1, 0.2])
        >>> round(r.estimate, 3), round(r.low, 3), round(r.high, 3), r.df
        (0.167, 0.023, 0.31, 2)
    """
    n = len(values)
    estimate = mean(values)
    if n < 2:
        return MeanInterval(estimate, math.nan, math.nan, math.nan, math.nan)
    se = sample_std(values) / math.sqrt(n)
    half = _t(0.5 + confidence / 2, n - 1) * se
    return MeanInterval(estimate, estimate - half, estimate + half, se, n - 1)


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> MeanInterval:
    """The difference of means ``mean(b) - mean(a)`` of two independent samples with Welch's t interval.

    ``se = sqrt(s_a²/n_a + s_b²/n_b)`` on the Welch-Satterthwaite degrees of freedom
    ``(s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a - 1) + (s_b²/n_b)²/(n_b - 1))`` (Welch 1947), ``n_a + n_b - 2`` when
    both samples have no spread at all. The t quantile takes the degrees of freedom rounded to a whole number.

    Args:
        a, b: the two samples, one number per independent unit.
        confidence: the interval's nominal coverage.

    Returns:
        a :class:`MeanInterval`; NaN bounds when either sample has fewer than two values.

    Example:
        >>> r = welch_interval([0.5, 0.6, 0.4], [0.7, 0.7, 0.6, 0.5])
        >>> round(r.estimate, 3), round(r.se, 3), round(r.df, 2), round(r.low, 3), round(r.high, 3)
        (0.125, 0.075, 4.33, -0.083, 0.333)
    """
    estimate = mean(b) - mean(a)
    if len(a) < 2 or len(b) < 2:
        return MeanInterval(estimate, math.nan, math.nan, math.nan, math.nan)
    var_a, var_b = sample_std(a) ** 2 / len(a), sample_std(b) ** 2 / len(b)
    se = math.sqrt(var_a + var_b)
    if var_a + var_b > 0:
        df = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    else:
        df = len(a) + len(b) - 2
    half = _t(0.5 + confidence / 2, df) * se
    return MeanInterval(estimate, estimate - half, estimate + half, se, df)


def detectable_difference(se: float, df: float, power: float = 0.80, confidence: float = 0.95) -> float:
    """The smallest true difference a two-sided test at level ``1 - confidence`` finds with probability ``power``:
    ``(t_{(1+c)/2, df} + t_{power, df}) * se`` (the usual power approximation with the t in place of the normal).

    Args:
        se: the standard error of the estimated difference (:class:`MeanInterval`'s ``se``).
        df: its degrees of freedom (rounded to a whole number).
        power: the chance of finding a difference of that size.
        confidence: one minus the test's level.

    Returns:
        the difference; NaN when the standard error or the degrees of freedom are (fewer than two runs).

    Example:
        >>> round(detectable_difference(0.05, 4), 3)
        0.186
    """
    if not (math.isfinite(se) and math.isfinite(df)):
        return math.nan
    return (_t(0.5 + confidence / 2, df) + _t(power, df)) * se


# ---------------------------------------------------------------- resampling and pass@k


def bootstrap_interval(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float] | None = None,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """A seeded percentile bootstrap interval of a statistic over independent units (scenarios, tasks).

    Draws ``resamples`` samples of ``len(values)`` units with replacement, computes the statistic on each, and
    returns the ``(1 - confidence)/2`` and ``(1 + confidence)/2`` :func:`quantile` of the estimates (Efron &
    Tibshirani 1993, ch. 13).

    Args:
        values: one number per unit, e.g. each scenario's pass@k estimate.
        statistic: what to compute on a resample (default: the mean).
        confidence: the interval's nominal coverage.
        resamples: bootstrap resamples.
        seed: the resampling seed; the same inputs and seed give the same interval.

    Returns:
        ``(low, high)``; ``(nan, nan)`` for no values.

    Example:
        >>> bootstrap_interval([1.0, 1.0, 1.0])
        (1.0, 1.0)
    """
    _z(confidence)  # validates confidence
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    values = list(values)
    if not values:
        return (math.nan, math.nan)
    if statistic is None:
        statistic = mean
    rng = random.Random(seed)
    size = len(values)
    estimates = sorted(statistic(rng.choices(values, k=size)) for _ in range(resamples))
    return (quantile(estimates, (1 - confidence) / 2), quantile(estimates, (1 + confidence) / 2))


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


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k for one task from ``n`` samples of which ``c`` passed.

    pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, "Evaluating Large Language Models Trained on Code",
    equation 1): the chance that at least one of ``k`` samples drawn without replacement from the ``n`` passes.

    Args:
        n: samples drawn for the task.
        c: how many of them passed, ``0 <= c <= n``.
        k: the budget, ``1 <= k <= n``.

    Example:
        >>> pass_at_k(4, 1, 2)
        0.5
        >>> pass_at_k(8, 2, 1)
        0.25
    """
    if not 0 <= c <= n:
        raise ValueError(f"passes c must lie in [0, n]; got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples; got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
