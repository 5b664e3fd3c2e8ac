"""Grading: the ``GroupwiseGrading`` object, its grader-answer validation, counters and the spread gate.

Above ``whileai.methods`` (pure math) and below the command line. No trainer, HTTP client or file reader is imported
here.
"""

from whileai.grading.groupwise import GradedGroup, GroupwiseGrading
from whileai.grading.spread import SpreadReport, spread_report
from whileai.grading.stats import GradingStats

__all__ = ["GradedGroup", "GradingStats", "GroupwiseGrading", "SpreadReport", "spread_report"]
