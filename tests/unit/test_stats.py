"""``whileai.stats``: the one quantile rule against numpy's default, the t and Welch intervals and Newcombe's
difference against published or scipy values, and the statistics the offline path re-exports being these ones."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from whileai import stats
from whileai.stats import (
    detectable_difference,
    newcombe_difference,
    quantile,
    t_interval,
    welch_interval,
    wilson_interval,
)

# scipy.stats.t.ppf(q, df), written out so that these tests run where scipy is not installed (CI).
T975 = {2: 4.302652729749462, 4: 2.7764451051977934, 5: 2.5705818356363146}
T80 = {4: 0.9409645772351816}

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=40), st.floats(min_value=0.0, max_value=1.0))
def test_the_quantile_is_numpys_default(values: list[float], q: float) -> None:
    np = pytest.importorskip("numpy")
    assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)), rel=1e-12, abs=1e-9)


@given(st.lists(finite, min_size=1, max_size=40))
def test_the_quantile_spans_the_sample(values: list[float]) -> None:
    assert quantile(values, 0.0) == min(values) and quantile(values, 1.0) == max(values)
    assert quantile(values, 0.5) == pytest.approx(statistics.median(values), rel=1e-12, abs=1e-9)
    assert quantile(reversed(values), 0.3) == quantile(values, 0.3)


def test_the_quantile_of_nothing_is_nan_and_its_level_is_checked() -> None:
    assert math.isnan(quantile([], 0.5))
    for level in (-0.1, 1.5, 95):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            quantile([1.0, 2.0], level)


def test_the_t_interval_is_students() -> None:
    values = [0.21, 0.05, 0.24, -0.03, 0.23]
    n, centre = len(values), sum(values) / len(values)
    sem = math.sqrt(sum((v - centre) ** 2 for v in values) / (n - 1) / n)
    interval = t_interval(values)
    assert interval.estimate == pytest.approx(centre) and interval.se == pytest.approx(sem) and interval.df == 4
    assert (interval.low, interval.high) == pytest.approx((centre - T975[4] * sem, centre + T975[4] * sem), abs=2e-3)
    assert detectable_difference(interval.se, interval.df) == pytest.approx((T975[4] + T80[4]) * sem, abs=2e-3)
    one = t_interval([0.5])
    assert one.estimate == 0.5 and math.isnan(one.low) and math.isnan(one.high)
    assert math.isnan(detectable_difference(one.se, one.df))


def test_welchs_interval_matches_scipy() -> None:
    a, b = [0.50, 0.61, 0.42], [0.71, 0.66, 0.63, 0.52]
    interval = welch_interval(a, b)
    var_a, var_b = statistics.variance(a) / 3, statistics.variance(b) / 4
    assert interval.estimate == pytest.approx(sum(b) / 4 - sum(a) / 3)
    assert interval.se == pytest.approx(math.sqrt(var_a + var_b))
    assert interval.df == pytest.approx((var_a + var_b) ** 2 / (var_a**2 / 2 + var_b**2 / 3))
    # scipy.stats.ttest_ind(b, a, equal_var=False).confidence_interval(); the df rounded to 4 for the t quantile
    assert (interval.low, interval.high) == pytest.approx((-0.07024532757760626, 0.3102453275776065), abs=0.02)
    flat = welch_interval([0.5, 0.5], [0.7, 0.7])
    assert flat.df == 2 and flat.low == flat.high == pytest.approx(0.2)
    assert math.isnan(welch_interval([0.5], [0.6, 0.7]).low)


def test_newcombes_difference_matches_his_worked_example() -> None:
    # Newcombe (1998), Statistics in Medicine 17, table II, example (a): 56/70 against 48/80, method 10.
    a = (48 / 80, *wilson_interval(48, 80))
    b = (56 / 70, *wilson_interval(56, 70))
    difference, low, high = newcombe_difference(a, b)
    assert difference == pytest.approx(0.2)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)


def test_the_offline_path_reexports_these_statistics() -> None:
    import whileai
    from whileai.simulations import passrate

    for name in ("pass_at_k", "wilson_interval", "bootstrap_interval"):
        assert getattr(passrate, name) is getattr(stats, name)
    assert whileai.pass_at_k is stats.pass_at_k and whileai.wilson_interval is stats.wilson_interval
