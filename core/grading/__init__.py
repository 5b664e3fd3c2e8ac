"""Grading: the ``GroupwiseGrading`` object and everything that turns a grader's answers into shaped rewards.

- ``groupwise``: the object (the page's knobs, ``shape``, ``check_spread``, ``trl_reward``); ``knobs``: the knobs
  and the gate's thresholds, each declared once;
- ``group``: one group's record; ``answers``: a grader's answer validated; ``calls``: a plain grader called with a
  time limit; ``tally``: the running counters;
- ``gate`` (with ``controls``): the spread gate; ``evaluate``: a grader measured against a known reference;
- ``scripted``: the rule grader; ``reference``: a function named in a recipe.

Above ``whileai.methods`` (pure math) and ``whileai.rows`` (what a rollout is, and its rendering), below the recipe
schema, the judge and the command line, none of which it imports; a recipe becomes a ``GroupwiseGrading`` in
``whileai.config.build``. The names below are resolved on first use, so that importing one module of the package does
not import the rest."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_LAZY = {
    "GradedGroup": "whileai.grading.group",
    "GradingStats": "whileai.grading.tally",
    "GroupwiseGrading": "whileai.grading.groupwise",
    "SpreadReport": "whileai.grading.verdict",
    "SpreadThresholds": "whileai.grading.knobs",
    "spread_report": "whileai.grading.verdict",
}

__all__ = ["GradedGroup", "GradingStats", "GroupwiseGrading", "SpreadReport", "SpreadThresholds", "spread_report"]

if TYPE_CHECKING:  # pragma: no cover
    from whileai.grading.group import GradedGroup
    from whileai.grading.groupwise import GroupwiseGrading
    from whileai.grading.knobs import SpreadThresholds
    from whileai.grading.tally import GradingStats
    from whileai.grading.verdict import SpreadReport, spread_report


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'whileai.grading' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted(_LAZY)
