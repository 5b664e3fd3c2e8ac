"""The judge: an OpenAI-compatible HTTP grader for ``GroupwiseGrading`` (issue 5)."""
