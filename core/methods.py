"""The math of groupwise grading (MiMo-V2.6 report, section 4.3), as pure functions on lists of floats.

- ``redistribute``: Groupwise Advantage Redistribution, equation 3 (section 4.3.2), with confirmed hacks treated as
  failures (``hack_rewards``).
- ``rank_factors``: a grader's best-first ranking turned into quality factors (whileai's convention; the report does
  not publish its map).
- ``synthesize_reward``: Groupwise Reward Synthesis, equation 2 (section 4.3.1).

No I/O, no torch, no grader calls: ``whileai.grading`` calls a grader and feeds its answer to these functions.
Every function works on one group; batching is the caller's loop (a group is 4 to 64 numbers).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from whileai.defaults import GROUPWISE_CAP, GROUPWISE_FLOOR, GROUPWISE_MIN_FACTOR

__all__ = [
    "POSITIVE_TOLERANCE",
    "Redistribution",
    "centered",
    "hack_rewards",
    "positive_passes",
    "rank_factors",
    "redistribute",
    "redistribute_checked",
    "redistribute_result",
    "synthesize_reward",
]


@dataclass(frozen=True)
class Redistribution:
    """The outcome of redistributing one group's advantages.

    Attributes:
        advantages: A'_i for every member of the group, summing to zero (the original advantages on fallback).
        original: A_i = R_i - mean(R), with each confirmed hack's R_i a failure's (:func:`hack_rewards`).
        factors: the quality factor used for each member (1.0 for failures and for passes the grader left out).
        lam: the common factor lambda after the cap (1.0 on fallback).
        capped: whether the cap bound lambda.
        reason: why the group fell back to its original advantages, or None when it did not.
    """

    advantages: list[float]
    original: list[float]
    factors: list[float]
    lam: float
    capped: bool
    reason: str | None

    @property
    def fell_back(self) -> bool:
        """True when the input was unusable and ``advantages`` are the original ones."""
        return self.reason is not None


# A pass moves only when its advantage exceeds this, relative to the largest |reward| (at least 1): a group whose
# positive mass is zero up to rounding (all passes at 0.1 + 0.2 vs 0.3, say) falls back instead of dividing by noise.
POSITIVE_TOLERANCE = 1e-9


def _is_number(value: object) -> bool:
    """A real number that is not a bool (numpy scalars included)."""
    kind = type(value)
    if kind is float or kind is int:  # the common case, without the ABC check
        return True
    return isinstance(value, numbers.Real) and kind is not bool


def _is_index(value: object) -> bool:
    """An integer index that is not a bool (numpy integers included)."""
    kind = type(value)
    return kind is int or (kind is not bool and isinstance(value, numbers.Integral))


def centered(rewards: Sequence[float]) -> list[float]:
    """The group's advantages before any grading, ``A_i = R_i - mean(R)``: ``[G]``.

    Example:
        >>> centered([1, 1, 0, 0])
        [0.5, 0.5, -0.5, -0.5]
    """
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def positive_passes(rewards: Sequence[float], passed: Iterable[int] | None = None) -> list[int]:
    """The passes whose advantage ``A_i = R_i - mean(R)`` is above zero, beyond rounding: the set equation 3 moves.

    With a binary reward these are all the passes of a mixed group (and none of an all-pass group). With partial
    credit a pass can sit at or below the group mean (``[1, 0.2, 0, 0]``: the 0.2 pass has ``A = -0.1``); it keeps its
    advantage like a failure, so a grader's ranking can never push it further down or lift it.

    Args:
        rewards: R_i, ``[G]``.
        passed: the indices of the passes; by default those with ``R_i > 0``.

    Returns:
        The indices ``i`` of passes with ``A_i > POSITIVE_TOLERANCE * max(1, max |R|)``, in group order.

    Example:
        >>> positive_passes([1, 0.2, 0, 0])
        [0]
    """
    values = [float(r) for r in rewards]
    if not values:
        return []
    mean = sum(values) / len(values)
    tolerance = POSITIVE_TOLERANCE * max(1.0, max(abs(r) for r in values))
    candidates = range(len(values)) if passed is None else passed
    chosen = [i for i in candidates if (passed is not None or values[i] > 0) and values[i] - mean > tolerance]
    return sorted(set(chosen))


def hack_rewards(rewards: Sequence[float], hacks: Iterable[int], hack_reward: float | None = None) -> list[float]:
    """The rewards with each confirmed hack treated as a failure (MiMo-V2.6 report, section 4.3.2).

    A hack gets a failure's reward: the lowest reward in its group, and never above 0. With a binary verifier that is
    0 (the report's "reset to zero"); with a +-1 verifier it is -1, so a hack never ends up above the failures; with
    partial credit it is the lowest credit given, or 0. ``hack_reward`` sets another value.

    Args:
        rewards: R_i, ``[G]``, finite.
        hacks: indices of the confirmed hacks.
        hack_reward: the reward a hack gets instead of a failure's.

    Returns:
        The rewards, ``[G]``, with every hack's replaced.

    Example:
        >>> hack_rewards([1, 1, -1, -1], hacks=[1])
        [1.0, -1.0, -1.0, -1.0]
    """
    values = [float(r) for r in rewards]
    chosen = sorted({int(i) for i in hacks})
    if not chosen:
        return values
    value = min(0.0, min(values)) if hack_reward is None else float(hack_reward)
    for i in chosen:
        values[i] = value
    return values


def redistribute_result(
    rewards: Sequence[float],
    factors: Mapping[int, float] | None = None,
    *,
    passed: Iterable[int] | None = None,
    hacks: Iterable[int] | None = None,
    hack_reward: float | None = None,
    cap: float = GROUPWISE_CAP,
) -> Redistribution:
    """Equation 3 of the MiMo-V2.6 report on one group, with the reason when it falls back.

    Same arguments as :func:`redistribute`; returns a :class:`Redistribution` so that a caller can count fallbacks.
    Nothing here raises on a grader's bad answer: an unusable factor map returns the original advantages with a
    ``reason``. Only a malformed group (empty, or a reward that is not a finite number), a bad ``hack_reward`` or a
    cap below 1 raises ``ValueError``, because no advantage exists to fall back to.
    """
    values = [float(r) for r in rewards]
    if not values:
        raise ValueError("redistribute needs at least one reward")
    if not all(math.isfinite(r) for r in values):
        raise ValueError(f"rewards must be finite numbers, got {list(rewards)!r}")
    if not _is_number(cap) or not cap >= 1.0:
        raise ValueError(f"cap must be a number >= 1 (lambda is never below 1), got {cap!r}")
    if hack_reward is not None and not (_is_number(hack_reward) and math.isfinite(hack_reward)):
        raise ValueError(f"hack_reward must be a finite number or None, got {hack_reward!r}")

    n = len(values)
    original = centered(values)

    def fallback(reason: str) -> Redistribution:
        return Redistribution(list(original), list(original), [1.0] * n, 1.0, False, reason)

    # The passes P: R_i > 0 unless the caller says which (a verifier may pass at a reward of 0.5, say).
    if passed is None:
        passes = [i for i, r in enumerate(values) if r > 0]
    else:
        passes = []
        for i in passed:
            if not _is_index(i) or not 0 <= i < n:
                return fallback(f"passed index {i!r} is not a member of the group of {n}")
            if int(i) not in passes:
                passes.append(int(i))
    # A confirmed hack is a failure: out of P, with a failure's reward, before A_i is formed.
    confirmed: list[int] = []
    for i in hacks or ():
        if not _is_index(i) or int(i) not in passes:
            return fallback(f"hack {i!r} is not a pass of the group")
        confirmed.append(int(i))
    if confirmed:
        values = hack_rewards(values, confirmed, hack_reward)
        original = centered(values)
        passes = [i for i in passes if i not in confirmed]
    pass_set = set(passes)

    # f_i in (0, 1] for the passes; a pass the map leaves out keeps factor 1.
    given = [1.0] * n
    for key, value in (factors or {}).items():
        if not _is_index(key) or int(key) not in pass_set:
            return fallback(f"factor given for {key!r}, which is not a pass")
        if not _is_number(value) or not 0.0 < value <= 1.0:
            return fallback(f"factor {value!r} for pass {key} is outside (0, 1]")
        given[int(key)] = float(value)
    return redistribute_checked(values, original, given, passes, cap)


def redistribute_checked(
    values: list[float], original: list[float], given: list[float], passes: list[int], cap: float
) -> Redistribution:
    """Equation 3 once its inputs are known good: ``values`` finite floats, ``original`` their centered values,
    ``given`` a float factor in (0, 1] per member (1 where none was given), ``passes`` distinct member indices and
    ``cap >= 1``. :func:`redistribute_result` checks all of that first; ``whileai.grading`` calls this directly on an
    answer it validated already (the reward function's hot path), so both compute the same numbers.

    Example:
        >>> redistribute_checked([1.0, 1.0, 0.0, 0.0], [0.5, 0.5, -0.5, -0.5], [1.0, 0.5, 1.0, 1.0], [0, 1], 3.0).lam
        1.3333333333333333
    """
    n = len(values)
    if not passes:
        return Redistribution(list(original), list(original), [1.0] * n, 1.0, False, "the group has no pass")
    # Only passes with a positive advantage move (partial credit: a pass at or below the mean keeps A_i).
    moving = positive_passes(values, passes)
    if not moving:
        reason = "no pass has an advantage above zero (nothing to move)"
        return Redistribution(list(original), list(original), [1.0] * n, 1.0, False, reason)
    mass = math.fsum([original[j] for j in moving])  # sum_P A_j
    weighted = math.fsum([given[j] * original[j] for j in moving])  # sum_P f_j A_j
    lam = mass / weighted  # >= 1, since every f_j <= 1 and every A_j > 0
    moves = [False] * n
    for j in moving:
        moves[j] = True
    f = [given[i] if moves[i] else 1.0 for i in range(n)]
    capped = lam > cap * (1.0 + 1e-12)  # beyond rounding: a lambda of cap + 1 ulp leaves the factors as they are
    if capped:
        # Cap lambda by pulling the factors toward 1, f_j -> 1 - t (1 - f_j), until lambda equals the cap: the
        # moved mass stays conserved and the order of the passes is the grader's. (Clamping lambda alone would
        # lose mass and the group-mean subtraction would lift every member, a worst-ranked pass included.)
        t = mass * (1.0 - 1.0 / cap) / (mass - weighted)
        f = [1.0 - t * (1.0 - f[i]) if moves[i] else 1.0 for i in range(n)]
        lam = float(cap)

    moved = [lam * f[i] * original[i] if moves[i] else original[i] for i in range(n)]  # A'_i
    # Zero group mean again, as the report does; a no-op up to rounding.
    mean = math.fsum(moved) / n
    advantages = [a - mean for a in moved]
    return Redistribution(advantages, original, f, lam, capped, None)


def redistribute(
    rewards: Sequence[float],
    factors: Mapping[int, float] | None = None,
    *,
    passed: Iterable[int] | None = None,
    hacks: Iterable[int] | None = None,
    hack_reward: float | None = None,
    cap: float = GROUPWISE_CAP,
) -> list[float]:
    """Groupwise Advantage Redistribution, equation 3 of the MiMo-V2.6 report (section 4.3.2).

    With ``A_i = R_i - mean(R)`` and ``P`` the passes with a positive advantage, quality factors ``f_i`` in (0, 1]
    first downweight the lower-quality passes, then the common factor ``lambda = sum_P A_j / sum_P f_j A_j`` puts the
    removed mass back among them::

        A'_i = lambda * f_i * A_i   for a pass with A_i > 0
        A'_i = A_i                  otherwise

    and the group mean is subtracted again (a no-op up to rounding). Failures keep their advantage,
    ``sum_P A'_i = sum_P A_i`` and ``A'_i / A'_j = f_i / f_j`` for two moving passes, so the best-ranked pass never
    loses advantage and the worst-ranked never gains.

    Non-binary rewards: a pass (``R_i > 0``) at or below the group mean has nothing to give and is not moved; with a
    binary reward ``P`` is every pass of a mixed group. ``lambda`` is at most ``cap``: when the factors are steeper
    than that, they are pulled toward 1 until ``lambda = cap`` (the mass stays conserved).

    A confirmed hack is treated as a failure before ``A_i`` is formed: it leaves ``P`` and gets a failure's reward
    (:func:`hack_rewards`: the lowest reward in the group, never above 0), so its advantage equals the failures'.

    Args:
        rewards: R_i for the G members of one group, ``[G]``.
        factors: quality factor by group index, for passes only; a pass missing here has factor 1.
        passed: the indices of the passes; by default those with ``R_i > 0``.
        hacks: the indices of confirmed hacks, passes only.
        hack_reward: the reward a hack gets instead of a failure's.
        cap: the upper bound on lambda, at least 1.

    Returns:
        A'_i for every member, ``[G]``. Unusable input (a factor outside (0, 1] or NaN, a factor, hack or pass index
        that is not a pass of the group, no pass with a positive advantage) returns the original advantages ``A_i``;
        call :func:`redistribute_result` to learn whether and why that happened.

    Example:
        >>> redistribute([1, 1, 0, 0], factors={0: 1.0, 1: 0.5})
        [0.6666666666666666, 0.3333333333333333, -0.5, -0.5]
        >>> redistribute([1, 1, -1, -1], hacks=[1])
        [1.5, -0.5, -0.5, -0.5]
    """
    return redistribute_result(
        rewards, factors, passed=passed, hacks=hacks, hack_reward=hack_reward, cap=cap
    ).advantages


def rank_factors(
    ranking: Sequence[int | Sequence[int]],
    passes: Iterable[int],
    min_factor: float = GROUPWISE_MIN_FACTOR,
) -> dict[int, float]:
    """Turn a best-first ranking of passes into quality factors (whileai's convention).

    The report ranks passes but does not publish how ranks become factors. whileai's map is linear in rank: with ``n``
    ranked passes, position ``k`` (0 = best) gets ``1 - (1 - min_factor) * k / (n - 1)``, so the best pass keeps its
    whole advantage (1.0) and the worst keeps ``min_factor``. Tied passes (an inner list) occupy consecutive positions
    and share the mean of those positions' factors. A single ranked pass, or one tie holding every pass, gets 1.0.
    Passes the ranking leaves out get no factor (``redistribute`` then gives them 1).

    Args:
        ranking: best first; an element is an index or a list of tied indices.
        passes: the indices that may be ranked.
        min_factor: the worst pass's factor, in (0, 1].

    Returns:
        ``{index: factor}`` for every ranked index.

    Raises:
        ValueError: an index that is not a pass, an index ranked twice, an empty tie, or ``min_factor`` outside (0, 1].

    Example:
        >>> rank_factors([2, [0, 3], 1], passes=[0, 1, 2, 3])
        {2: 1.0, 0: 0.75, 3: 0.75, 1: 0.5}
    """
    if not _is_number(min_factor) or not 0.0 < min_factor <= 1.0:
        raise ValueError(f"min_factor must be in (0, 1], got {min_factor!r}")
    allowed = set(passes)
    tiers: list[list[int]] = []
    seen: set[int] = set()
    for entry in ranking:
        tier = list(entry) if isinstance(entry, (list, tuple)) else [entry]
        if not tier:
            raise ValueError("the ranking holds an empty tie")
        tier_ints: list[int] = []
        for index in tier:
            if not _is_index(index):
                raise ValueError(f"ranked item {index!r} is not an integer index")
            index = int(index)
            if index not in allowed:
                raise ValueError(f"ranked index {index} is not a pass")
            if index in seen:
                raise ValueError(f"index {index} is ranked twice")
            seen.add(index)
            tier_ints.append(index)
        tiers.append(tier_ints)

    return _tier_factors(tiers, len(seen), min_factor)


def _tier_factors(tiers: Sequence[Sequence[int]], n: int, min_factor: float) -> dict[int, float]:
    """:func:`rank_factors` once its ranking is known good: ``tiers`` of distinct ``int`` indices, ``n`` of them in
    all, best first (``whileai.grading.answers`` calls this on a ranking it validated already)."""
    if n == 0:
        return {}

    def at(position: int) -> float:
        if position == 0:
            return 1.0
        if position == n - 1:
            return float(min_factor)  # exact at both ends
        return 1.0 - (1.0 - min_factor) * position / (n - 1)

    factors: dict[int, float] = {}
    position = 0
    for tier in tiers:
        if len(tier) == 1:  # the common case: the mean of one factor is that factor
            factors[tier[0]] = at(position)
            position += 1
            continue
        shared = sum(at(position + k) for k in range(len(tier))) / len(tier)
        for index in tier:
            factors[index] = shared
        position += len(tier)
    return factors


def synthesize_reward(
    r_test: float,
    solution: float,
    behavior: float,
    floor: float = GROUPWISE_FLOOR,
) -> float:
    """Groupwise Reward Synthesis, equation 2 of the MiMo-V2.6 report (section 4.3.1).

    ``R = R_test * max(floor, S_sol) * max(floor, S_beh)``: the verifier's reward scaled by the solution and behaviour
    scores a grader gave against the task's rubric. A floor above 0 bounds how much the grader can remove (the
    text-to-SQL run used 0.5, a factor of at most 4x between two passes).

    Args:
        r_test: the verifier's reward.
        solution: S_sol in [0, 1].
        behavior: S_beh in [0, 1].
        floor: the lower bound applied to each score, in [0, 1].

    Raises:
        ValueError: a score or the floor outside [0, 1], or a value that is not a finite number.

    Example:
        >>> synthesize_reward(1.0, 0.9, 0.5)
        0.45
    """
    for name, value in (("solution", solution), ("behavior", behavior), ("floor", floor)):
        if not _is_number(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if not _is_number(r_test) or not math.isfinite(r_test):
        raise ValueError(f"r_test must be a finite number, got {r_test!r}")
    return float(r_test) * max(floor, float(solution)) * max(floor, float(behavior))
