"""The defaults of the reference page's table, where the page says they live (``whileai/simulations/defaults.py``).

They are defined on the ground floor, ``whileai.defaults`` (the pure math reads them and must not stand on the offline
path); this module re-exports every one under the same name.
"""

from __future__ import annotations

from whileai.defaults import (
    GROUPWISE_CAP,
    GROUPWISE_FLOOR,
    GROUPWISE_HACK_ZERO,
    GROUPWISE_MIN_FACTOR,
    GROUPWISE_MODE,
    SPREAD_BROKEN_FRACTION,
    SPREAD_CONTROL_GROUPS,
    SPREAD_MAX_NEAR_MEDIAN,
    SPREAD_MAX_ORDERED_COPIES,
    SPREAD_MIN_AGREEMENT,
    SPREAD_MIN_SCORES,
    SPREAD_MIN_STD,
    SPREAD_TOLERANCE,
)

__all__ = [
    "GROUPWISE_CAP",
    "GROUPWISE_FLOOR",
    "GROUPWISE_HACK_ZERO",
    "GROUPWISE_MIN_FACTOR",
    "GROUPWISE_MODE",
    "SPREAD_BROKEN_FRACTION",
    "SPREAD_CONTROL_GROUPS",
    "SPREAD_MAX_NEAR_MEDIAN",
    "SPREAD_MAX_ORDERED_COPIES",
    "SPREAD_MIN_AGREEMENT",
    "SPREAD_MIN_SCORES",
    "SPREAD_MIN_STD",
    "SPREAD_TOLERANCE",
]
