"""Grading: the ``GroupwiseGrading`` object and everything that turns a grader's answers into shaped rewards.

- ``groupwise``: the object (the page's knobs, ``shape``, ``check_spread``, ``trl_reward``);
- ``group``: one group's record; ``answers``: a grader's answer validated; ``rewards``: a verifier's reward read as
  TRL stores it; ``calls``: a plain grader called with a time limit; ``stats``: the running counters;
  ``text``: conversations rendered as the grader reads them;
- ``gate`` (with ``controls``): the spread gate;
- ``scripted``: the rule grader; ``reference``: a function named in a recipe; ``build``: a recipe's grading.

Above ``whileai.methods`` (pure math) and below the command line. The HTTP judge is ``whileai.judge``, TRL's
calling convention ``whileai.integrations.trl``. The names below are resolved on first use, so that importing one
module of the package (``whileai.rows`` reads rewards through ``whileai.rows.rewards``) does not import the rest.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_LAZY = {
    "GradedGroup": "whileai.grading.group",
    "GradingStats": "whileai.grading.tally",
    "GroupwiseGrading": "whileai.grading.groupwise",
    "SpreadReport": "whileai.grading.gate",
    "SpreadThresholds": "whileai.grading.gate",
    "spread_report": "whileai.grading.gate",
}

__all__ = ["GradedGroup", "GradingStats", "GroupwiseGrading", "SpreadReport", "SpreadThresholds", "spread_report"]

if TYPE_CHECKING:  # pragma: no cover
    from whileai.grading.gate import SpreadReport, SpreadThresholds, spread_report
    from whileai.grading.group import GradedGroup
    from whileai.grading.groupwise import GroupwiseGrading
    from whileai.grading.tally import GradingStats


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'whileai.grading' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted(_LAZY)
