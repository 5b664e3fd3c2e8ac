"""Position bias: the seeded orders a group is shown in, the mean-rank consensus of several orders, Kendall's tau.

A judge reading a list favours some positions. Each call therefore shows the rollouts in a fresh order drawn from
the seed and the group's content (so a re-run shows the same orders and hits the cache), and ``permutations: k``
asks k orders: the second is the reverse of the first, later ones are drawn again. ``consensus_tiers`` aggregates the
rankings by mean rank and ``mean_kendall_tau`` measures how far the orders agree, the judge's own consistency.
Pure functions: nothing here calls a judge.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

from whileai.stats import kendall_tau

__all__ = ["consensus_tiers", "display_orders", "fractional_ranks", "mean_kendall_tau"]


def display_orders(size: int, count: int, seed: int, key: str) -> list[list[int]]:
    """``count`` orders of ``range(size)``: a seeded shuffle, its reverse, then further distinct shuffles.

    Args:
        size: rollouts in the group.
        count: orders wanted (the ``permutations`` setting).
        seed: the judge's seed.
        key: a digest of the group's content, so two groups get independent orders.

    Example:
        >>> a, b = display_orders(4, 2, seed=0, key="g")
        >>> sorted(a) == [0, 1, 2, 3] and b == a[::-1]
        True
    """
    rng = random.Random(f"{seed}:{key}")
    orders: list[list[int]] = []
    for n in range(count):
        if n == 1:
            order = orders[0][::-1]
        else:
            order = list(range(size))
            for _ in range(20):  # a fresh order where one exists (a group of 2 has only two)
                rng.shuffle(order)
                if order not in orders:
                    break
        orders.append(list(order))
    return orders


def fractional_ranks(tiers: Sequence[Sequence[int]]) -> dict[int, float]:
    """1-based ranks from best-first tiers; the members of a tie share the mean of the places they fill.

    Example:
        >>> fractional_ranks([[3], [0, 2], [1]])
        {3: 1.0, 0: 2.5, 2: 2.5, 1: 4.0}
    """
    ranks: dict[int, float] = {}
    place = 1
    for tier in tiers:
        share = place + (len(tier) - 1) / 2
        for item in tier:
            ranks[item] = share
        place += len(tier)
    return ranks


def _complete(tiers: Sequence[Sequence[int]], items: Sequence[int]) -> list[list[int]]:
    """``tiers`` restricted to ``items``, with the items it left out tied last."""
    wanted = set(items)
    kept = [[i for i in tier if i in wanted] for tier in tiers]
    kept = [tier for tier in kept if tier]
    placed = {i for tier in kept for i in tier}
    rest = [i for i in items if i not in placed]
    return [*kept, rest] if rest else kept


def consensus_tiers(rankings: Sequence[Sequence[Sequence[int]]], items: Sequence[int]) -> list[list[int]]:
    """Best-first tiers of ``items`` by mean rank over several rankings; equal means tie.

    An item a ranking leaves out (it was named a hack in that order only) ranks last in that ranking.

    Example:
        >>> consensus_tiers([[[0], [1], [2]], [[1], [0], [2]]], items=[0, 1, 2])
        [[0, 1], [2]]
    """
    if not items:
        return []
    totals = dict.fromkeys(items, 0.0)
    for ranking in rankings:
        for item, rank in fractional_ranks(_complete(ranking, items)).items():
            totals[item] += rank
    ordered = sorted(items, key=lambda i: totals[i])
    tiers: list[list[int]] = []
    for item in ordered:
        if tiers and math.isclose(totals[tiers[-1][0]], totals[item], abs_tol=1e-9):
            tiers[-1].append(item)
        else:
            tiers.append([item])
    return tiers


def mean_kendall_tau(rankings: Sequence[Sequence[Sequence[int]]], items: Sequence[int]) -> float | None:
    """Mean Kendall's tau-b over every pair of rankings of ``items`` (left-out items tie last); None if undefined."""
    ranks = [fractional_ranks(_complete(r, items)) for r in rankings]
    taus = [t for a, b in itertools.combinations(ranks, 2) if (t := kendall_tau(a, b)) is not None]
    return sum(taus) / len(taus) if taus else None
