"""Validation of what a grader returns, before any of it touches an advantage.

A grader is user code or a model behind HTTP: its answer is untrusted. ``read_group_answer`` (advantage mode) and
``read_pass_answer`` (reward mode) turn an answer into factors, hacks or scores, or raise ``UnusableAnswer`` with
the reason; the caller then falls back to the original advantages. Nothing here calls a grader.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from whileai.methods import rank_factors

__all__ = ["GroupAnswer", "PassAnswer", "UnusableAnswer", "read_group_answer", "read_pass_answer"]

_DIGITS = re.compile(r"-?[0-9]+")

# Keys a grader may add for people to read; they are kept out of the math.
_NOTE_KEYS = frozenset({"reason", "reasons", "notes"})


class UnusableAnswer(ValueError):
    """A grader's answer that cannot be used; the message is the reason the group fell back."""


@dataclass(frozen=True)
class GroupAnswer:
    """A validated advantage-mode answer.

    Attributes:
        factors: quality factor of each pass that keeps its pass (hacks removed when they are zeroed).
        hacks: confirmed hacks, group indices.
    """

    factors: dict[int, float]
    hacks: list[int]


@dataclass(frozen=True)
class PassAnswer:
    """A validated reward-mode answer for one pass: S_sol and S_beh in [0, 1]."""

    solution: float
    behavior: float


def _as_list(value: object) -> list | tuple | None:
    """A list or tuple as it is; another sequence (a range, a numpy array, a torch tensor, a pandas Series) as the
    list it holds; None for anything else (a string is text, not a list of indices)."""
    kind = type(value)
    if kind is list or kind is tuple:
        return value  # type: ignore[return-value]
    if isinstance(value, (str, bytes, Mapping)):
        return None
    to_list = getattr(value, "tolist", None)
    if callable(to_list):  # numpy, torch, pandas: their elements become Python numbers
        try:
            listed = to_list()
        except Exception:
            return None
        return listed if isinstance(listed, list) else None  # a 0-d array is a number, not a list
    if isinstance(value, Sequence):
        return list(value)
    return None


def _is_score(value: object) -> bool:
    """A finite real number that is not a bool (an int too large for a float is not one)."""
    kind = type(value)
    if kind is not float and kind is not int and (kind is bool or not isinstance(value, numbers.Real)):
        return False
    try:
        return math.isfinite(float(value))  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return False


def _index(value: object, what: str) -> int:
    """An index given as an int or as a string of digits (JSON object keys are strings)."""
    if type(value) is int:
        return value  # type: ignore[return-value]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    raise UnusableAnswer(f"{what} {value!r} is not an index")


def _check_keys(answer: object, allowed: frozenset[str]) -> Mapping[str, object]:
    if type(answer) is not dict and not isinstance(answer, Mapping):
        raise UnusableAnswer(f"answer is not a dict: got {type(answer).__name__}")
    unknown = sorted(str(k) for k in answer if k not in allowed and k not in _NOTE_KEYS)
    if unknown:
        raise UnusableAnswer(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    return answer


def read_group_answer(
    answer: object,
    *,
    size: int,
    passes: Sequence[int],
    min_factor: float,
    hack_zero: bool,
) -> GroupAnswer:
    """Validate an advantage-mode answer for a group of ``size`` with the given passes.

    The answer is ``{"ranking": [...]}`` (best first, an inner list is a tie) or ``{"factors": {index: f}}`` with f in
    (0, 1], plus an optional ``"hacks"`` list of passes. A ranking must hold every pass that is not a hack; hacks may
    be left out of it (and are, when ``hack_zero``, dropped from it). With ``hack_zero=False`` a hack stays a pass and,
    when the ranking leaves it out, ranks last.

    Raises:
        UnusableAnswer: not a dict, a missing or unknown key, both or neither of ranking and factors, an index that is
            unknown, a failure, or given twice, a factor outside (0, 1], a ranking that leaves out a pass.
    """
    body = _check_keys(answer, frozenset({"ranking", "factors", "hacks"}))
    if ("ranking" in body) == ("factors" in body):
        raise UnusableAnswer("answer needs exactly one of 'ranking' and 'factors'")
    pass_set = set(passes)
    hacks = _read_hacks(body.get("hacks"), size, pass_set)
    keep = [i for i in passes if not (hack_zero and i in hacks)]
    if "ranking" in body:
        tiers = _read_ranking(body["ranking"], size, pass_set, hacks, keep, hack_zero)
        try:
            factors = rank_factors(tiers, keep, min_factor=min_factor)
        except ValueError as err:  # pragma: no cover - every case is checked above
            raise UnusableAnswer(str(err)) from err
        return GroupAnswer(factors, hacks)
    return GroupAnswer(_read_factors(body["factors"], pass_set, hacks, hack_zero), hacks)


def _read_hacks(raw: object, size: int, passes: set[int]) -> list[int]:
    """The confirmed hacks an answer names: passes of the group, each once."""
    listed = [] if raw is None else _as_list(raw)
    if listed is None:
        raise UnusableAnswer(f"'hacks' is not a list: {raw!r}")
    hacks: list[int] = []
    for item in listed:
        index = _index(item, "hack")
        if not 0 <= index < size:
            raise UnusableAnswer(f"hack {index} is not a member of the group of {size}")
        if index not in passes:
            raise UnusableAnswer(f"hack {index} is a failure, not a pass")
        if index in hacks:
            raise UnusableAnswer(f"hack {index} is named twice")
        hacks.append(index)
    return hacks


def _read_ranking(
    raw: object, size: int, passes: set[int], hacks: list[int], keep: list[int], hack_zero: bool
) -> list[list[int]]:
    """A best-first ranking's tiers: every pass in ``keep`` once; hacks dropped with ``hack_zero``, else ranked last
    when the ranking leaves them out."""
    ranking = _as_list(raw)
    if ranking is None:
        raise UnusableAnswer(f"'ranking' is not a list: {raw!r}")
    tiers: list[list[int]] = []
    for entry in ranking:
        items = _as_list(entry)
        if items is None:
            items = [entry]
        tier = [_index(item, "ranked item") for item in items]
        for index in tier:
            if not 0 <= index < size:
                raise UnusableAnswer(f"ranked index {index} is not a member of the group of {size}")
            if index not in passes:
                raise UnusableAnswer(f"ranked index {index} is a failure")
        if hack_zero:
            tier = [i for i in tier if i not in hacks]
        if tier:
            tiers.append(tier)
    ranked = [i for tier in tiers for i in tier]
    if len(ranked) != len(set(ranked)):
        twice = next(i for i in ranked if ranked.count(i) > 1)
        raise UnusableAnswer(f"index {twice} is ranked twice")
    missing = [i for i in keep if i not in ranked]
    if not hack_zero:
        unranked_hacks = [i for i in missing if i in hacks]
        missing = [i for i in missing if i not in hacks]
        if unranked_hacks:
            tiers.append(unranked_hacks)
    if missing:
        raise UnusableAnswer(f"the ranking leaves out pass {missing[0]}")
    return tiers


def _read_factors(raw: object, passes: set[int], hacks: list[int], hack_zero: bool) -> dict[int, float]:
    """Quality factors by pass, each in (0, 1]; a hack's dropped with ``hack_zero``."""
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise UnusableAnswer(f"'factors' is not a dict: {raw!r}")
    factors: dict[int, float] = {}
    for key, value in raw.items():
        index = _index(key, "factor key")
        if index not in passes:
            raise UnusableAnswer(f"factor given for {index}, which is not a pass")
        if index in factors:
            raise UnusableAnswer(f"factor for {index} is given twice")
        if not _is_score(value) or not 0.0 < value <= 1.0:
            raise UnusableAnswer(f"factor {value!r} for pass {index} is outside (0, 1]")
        if hack_zero and index in hacks:
            continue
        factors[index] = float(value)
    return factors


def read_pass_answer(answer: object) -> PassAnswer:
    """Validate a reward-mode answer ``{"solution": s, "behavior": b}`` with both scores in [0, 1].

    Raises:
        UnusableAnswer: not a dict, a missing or unknown key, a score that is not a number in [0, 1].
    """
    body = _check_keys(answer, frozenset({"solution", "behavior"}))
    scores = []
    for key in ("solution", "behavior"):
        if key not in body:
            raise UnusableAnswer(f"answer has no {key!r}")
        value = body[key]
        if not _is_score(value) or not 0.0 <= value <= 1.0:
            raise UnusableAnswer(f"{key} score {value!r} is outside [0, 1]")
        scores.append(float(value))
    return PassAnswer(*scores)
