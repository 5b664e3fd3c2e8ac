"""The judge: an OpenAI-compatible HTTP grader for ``GroupwiseGrading`` (issue 5).

``JudgeConfig`` says where the judge lives and how it is asked; ``JudgeGrader`` ranks each mixed group (advantage
mode); ``JudgeScorer`` and ``JudgeRubricWriter`` score passes against per-task rubrics (reward mode);
``judge_grading`` builds a ``GroupwiseGrading`` around them. Importing this package does not import ``openai``: the
HTTP client is built on a judge's first call.

Example (needs a server, e.g. ``vllm serve Qwen/Qwen3-8B``)::

    from whileai.judge import JudgeConfig, judge_grading

    grading = judge_grading(JudgeConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen3-8B"))
    print(grading.check_spread(rows))
    print(grading.grader.stats)
"""

from whileai.judge.answers import JudgeAnswerError
from whileai.judge.cache import JudgeCache
from whileai.judge.client import JudgeCallError, JudgeClient
from whileai.judge.config import JudgeConfig
from whileai.judge.grader import (
    JudgeGrader,
    JudgeRubricWriter,
    JudgeScorer,
    build_judge,
    judge_config,
    judge_grading,
)
from whileai.judge.prompts import JudgePrompts, load_prompts
from whileai.judge.stats import JudgeStats

__all__ = [
    "JudgeAnswerError",
    "JudgeCache",
    "JudgeCallError",
    "JudgeClient",
    "JudgeConfig",
    "JudgeGrader",
    "JudgePrompts",
    "JudgeRubricWriter",
    "JudgeScorer",
    "JudgeStats",
    "build_judge",
    "judge_config",
    "judge_grading",
    "load_prompts",
]
