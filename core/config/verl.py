"""verl's reward manager ``whileai``: the recipe's half of ``whileai.integrations.verl``.

verl builds its reward manager by name from its registry; this module registers ``whileai`` there, a
``GroupwiseRewardManager`` whose groups build their ``GroupwiseGrading`` from the recipe that
``+reward.reward_kwargs.recipe`` names (its ``grader``, ``grading`` and ``spread`` sections, as ``whileai train``
reads them). It is whileai's ``verl.plugins`` entry point, so ``import verl`` loads it in every process of a run,
unless ``VERL_USE_EXTERNAL_PLUGINS`` is ``none`` or leaves ``whileai`` out (verl logs a plugin that fails to load at
DEBUG only; the symptom is verl's "Unknown reward manager: whileai"). Without the entry point, select it by path:
``reward.reward_manager.source=importlib reward.reward_manager.module.path=pkg://whileai.config.verl
reward.reward_manager.name=WhileaiRewardManager``.

:class:`Preflight`, a Hydra callback, refuses what the manager would refuse before ``main_ppo`` starts Ray. This
module imports verl; nothing of the library imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from verl.experimental.reward_loop.reward_manager import register

from whileai.config.build import build_grading
from whileai.config.load import load_recipe
from whileai.errors import BadInput, describe
from whileai.integrations.verl import Groups, GroupwiseRewardManager, VerlSettings, check_config
from whileai.progress import visible

__all__ = ["Preflight", "RecipeGroups", "WhileaiRewardManager"]


class RecipeGroups(Groups):
    """The run's ``Groups``, grading with the recipe's grader: a judge in reward mode keeps the rubrics it writes
    beside the run's grading log, and its plan is said; the recipe's ``spread.watch`` and ``spread.seed`` hold."""

    def __init__(self, settings: VerlSettings) -> None:
        loaded = load_recipe(Path(settings.recipe), [])
        grading = build_grading(loaded, rubrics_path=Path(settings.out) / "rubrics.json", say=print)
        spread = loaded.recipe.spread
        super().__init__(settings, grading, spread.watch, spread.seed)


@register("whileai")
class WhileaiRewardManager(GroupwiseRewardManager):
    """verl's reward manager ``whileai``: ``GroupwiseRewardManager`` with the recipe's grading (``RecipeGroups``);
    a recipe that does not load is refused when the manager starts."""

    recipe_groups = RecipeGroups

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("grading") is None:
            load_recipe(Path(check_config(config).recipe), [])  # a bad recipe is said at the reward worker's start
        super().__init__(config, *args, **kwargs)


class Preflight(Callback):
    """A Hydra callback that checks verl's composed config (``check_config``) and loads the recipe before
    ``main_ppo`` starts Ray, loads a model or builds a worker: what the manager would refuse on a reward worker is
    refused at the command line. The shipped config names it (``hydra.callbacks.whileai``); on verl's own config, add
    ``+hydra.callbacks.whileai._target_=whileai.config.verl.Preflight``."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        # Hydra turns a callback's exception into a warning and runs the job anyway: every error stops it here.
        try:
            settings = check_config(config)
            load_recipe(Path(settings.recipe), [])
        except BadInput as error:
            print(visible(f"whileai: {error}"), file=sys.stderr)
            raise SystemExit(error.exit_code) from None
        except Exception as error:  # a config OmegaConf cannot read (an interpolation, a bad value)
            print(visible(f"whileai: verl's config could not be checked: {describe(error)}"), file=sys.stderr)
            raise SystemExit(BadInput.exit_code) from None
        print(visible(f"whileai: verl's config keeps equation 3; recipe {settings.recipe}"))
