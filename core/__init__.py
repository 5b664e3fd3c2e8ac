"""whileai: groupwise grading for GRPO.

A binary test reward makes every passing rollout equal. whileai gives the trainer a grader that tells passing rollouts
apart (MiMo-V2.6, section 4.3), a spread gate that refuses a grader whose scores do not vary, a reward function for
TRL's ``GRPOTrainer`` and the advantage estimators of token batches with tool spans.

``import whileai`` offers the library: ``GroupwiseGrading`` (the grading object, its spread report and TRL reward
function), ``redistribute`` and ``synthesize_reward`` (equations 3 and 2), ``GroupwiseGRPOTrainer`` and the judge
(``JudgeConfig``, ``build_judge``). The offline support-desk simulator lives in ``whileai.simulations``; recipes, runs
and the command line are the application built on top (``whileai.config``, ``whileai.training``, ``whileai.cli``).

``import whileai`` stays light: it imports neither torch nor trl, transformers, vllm or datasets. The estimators in
``whileai.advantages`` import torch when that module is imported.
"""

from __future__ import annotations

# The source folder is `core/`, installed as `whileai` through setuptools' package-dir. Imported under any other
# name (``import core`` from the repository root) it would be a second copy of the package with its own state.
if __name__ != "whileai":  # pragma: no cover - exercised by tests/unit/test_packaging.py in a subprocess
    raise ImportError(
        f"the whileai source folder was imported as {__name__!r}; install the project "
        "(`pip install -e .`) and `import whileai`"
    )

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The library's face, resolved on first use so that `import whileai` costs nothing it does not need: the grading object
# and what it answers, equations 2 and 3, the trainer class, the judge, the intervals the reports use.
_LAZY = {
    "GroupwiseGrading": "whileai.grading.groupwise",
    "GradedGroup": "whileai.grading.group",
    "GradingStats": "whileai.grading.tally",
    "SpreadReport": "whileai.grading.verdict",
    "redistribute": "whileai.methods",
    "rank_factors": "whileai.methods",
    "synthesize_reward": "whileai.methods",
    "GroupwiseGRPOTrainer": "whileai.integrations.trl_trainer",  # imports trl: the train extra
    "JudgeConfig": "whileai.judge.settings",
    "build_judge": "whileai.judge.grader",
    "pass_at_k": "whileai.stats",
    "wilson_interval": "whileai.stats",
}
# The support-desk simulator's names, at home in ``whileai.simulations``; still answered here, for the reference
# page's ``wai.seeded_agent`` and code written against it, but not offered (``__all__``, ``dir``).
_SIMULATOR = {
    "seeded_agent": "whileai.simulations.agents",
    "simulate": "whileai.simulations.rollouts",
    "score": "whileai.simulations.passrate",
    "load_scenarios": "whileai.simulations.scenarios",
    "model_agent": "whileai.simulations.model_agent",
    "customer_model": "whileai.simulations.customer",
}

__all__ = [  # noqa: RUF022 - the version first, then the lazy names in _LAZY's order
    "__version__",
    "GroupwiseGrading",
    "GradedGroup",
    "GradingStats",
    "SpreadReport",
    "redistribute",
    "rank_factors",
    "synthesize_reward",
    "GroupwiseGRPOTrainer",
    "JudgeConfig",
    "build_judge",
    "pass_at_k",
    "wilson_interval",
]

if TYPE_CHECKING:  # pragma: no cover
    from whileai.grading.group import GradedGroup
    from whileai.grading.groupwise import GroupwiseGrading
    from whileai.grading.tally import GradingStats
    from whileai.grading.verdict import SpreadReport
    from whileai.integrations.trl_trainer import GroupwiseGRPOTrainer
    from whileai.judge.grader import build_judge
    from whileai.judge.settings import JudgeConfig
    from whileai.methods import rank_factors, redistribute, synthesize_reward
    from whileai.stats import pass_at_k, wilson_interval


# Subpackages and modules the docs name, reachable as ``whileai.methods`` after a bare ``import whileai``.
_SUBMODULES = frozenset(
    {"advantages", "defaults", "errors", "grading", "integrations", "judge", "methods", "rows", "simulations"}
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f"whileai.{name}")  # imported on first use: whileai.advantages brings torch
    module = _LAZY.get(name) or _SIMULATOR.get(name)
    if module is None:
        raise AttributeError(f"module 'whileai' has no attribute {name!r}")
    try:
        value = getattr(import_module(module), name)
    except ModuleNotFoundError as err:
        if module.startswith("whileai.") and err.name and not err.name.startswith("whileai"):
            from whileai.errors import MissingExtra

            raise MissingExtra(err.name, "train", f"whileai.{name}") from None
        raise
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({"__version__", *_LAZY, *_SUBMODULES})
