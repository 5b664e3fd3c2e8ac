"""Grading: the ``GroupwiseGrading`` object and everything that turns a grader's answers into shaped rewards.

- ``groupwise``: the object (the page's knobs, ``shape``, ``check_spread``, ``trl_reward``);
- ``group``: one group's record; ``answers``: a grader's answer validated; ``rewards``: a verifier's reward read as
  TRL stores it; ``calls``: a plain grader called with a time limit; ``stats``: the running counters;
  ``text``: conversations rendered as the grader reads them;
- ``gate`` (with ``controls``): the spread gate;
- ``scripted``: the rule grader; ``reference``: a function named in a recipe; ``build``: a recipe's grading.

Above ``whileai.methods`` (pure math) and below the command line. The HTTP judge is ``whileai.judge``, TRL's
calling convention ``whileai.integrations.trl``.
"""

from whileai.grading.gate import SpreadReport, SpreadThresholds, spread_report
from whileai.grading.group import GradedGroup
from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.stats import GradingStats

__all__ = ["GradedGroup", "GradingStats", "GroupwiseGrading", "SpreadReport", "SpreadThresholds", "spread_report"]
