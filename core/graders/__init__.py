"""Graders: scripted rules, your functions by reference, and the builder that turns a recipe into grading.

The HTTP judge lives in ``whileai.judge``; this package only builds it when a recipe asks for it.
"""

from whileai.graders.build import build_grader, build_grading, grader_from_spec
from whileai.graders.reference import load_callable
from whileai.graders.scripted import ScriptedGrader

__all__ = ["ScriptedGrader", "build_grader", "build_grading", "grader_from_spec", "load_callable"]
