"""The judge: an OpenAI-compatible HTTP grader for ``GroupwiseGrading``.

``JudgeConfig`` says where the judge lives and how it is asked; ``JudgeGrader`` ranks each mixed group (advantage
mode); ``JudgeScorer`` and ``JudgeRubricWriter`` score passes against per-task rubrics (reward mode);
``build_judge`` makes the one a mode asks for. Importing this package does not import ``aiohttp``: the HTTP client is
built on a judge's first call.

Example (needs a server, e.g. ``vllm serve Qwen/Qwen3-8B``)::

    import whileai as wai
    from whileai.judge import JudgeConfig, build_judge

    judge = build_judge(JudgeConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen3-8B"))
    grading = wai.GroupwiseGrading(grader=judge)  # mode="reward" with build_judge(config, "reward")
    print(grading.check_spread(rows))
    print(grading.grader.stats)
"""

import importlib

# Where each public name lives. They are imported on first use (PEP 562), so that ``whileai.judge.settings``, which the
# recipe schema reads for the judge section, does not bring in the HTTP client, asyncio and ssl with it: the spread
# gate with a scripted grader never calls a judge and starts faster without them.
_HOMES = {
    "JudgeAnswerError": "whileai.judge.replies",
    "JudgeCache": "whileai.judge.cache",
    "JudgeCallError": "whileai.judge.client",
    "JudgeClient": "whileai.judge.client",
    "JudgeConfig": "whileai.judge.settings",
    "JudgeGrader": "whileai.judge.grader",
    "JudgePrompts": "whileai.judge.prompts",
    "JudgeRubricWriter": "whileai.judge.rubrics",
    "JudgeScorer": "whileai.judge.rubrics",
    "JudgeStats": "whileai.judge.usage",
    "build_judge": "whileai.judge.grader",
    "judge_config": "whileai.judge.grader",
    "load_prompts": "whileai.judge.prompts",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = list(_HOMES)  # every public name, in the order of _HOMES
