"""verl's side of groupwise grading: the reward manager ``whileai``, for verl 0.9's reward loop.

verl 0.9 (``verl/experimental/reward_loop``) scores each response when its rollout ends, on a reward worker, by
``await manager.run_single(data)`` with ``data`` one session's rows; the score lands on the response's last token
(``rm_scores``), and ``compute_grpo_outcome_advantage`` sums each response's token rewards and subtracts its ``uid``
group's mean (``algorithm.norm_adv_by_std_in_grpo=False``). :class:`WhileaiRewardManager` decodes the response,
scores it with the verifier (verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``), and
waits in a :class:`~whileai.integrations.groups.GroupCollector` until its group is whole and graded; it returns
``A'_i + mean(R)``, so verl's mean subtraction yields equation 3.

Importing this module registers the manager under ``whileai`` in verl's registry. whileai declares it as a
``verl.plugins`` entry point, so ``import verl`` does that in every process of a run. Without the entry point
(an installation that does not process entry points), select it by path instead:
``reward.reward_manager.source=importlib reward.reward_manager.module.path=pkg://whileai.integrations.verl
reward.reward_manager.name=WhileaiRewardManager``.

Options (``+reward.reward_kwargs.NAME=VALUE``):

- ``recipe``: the whileai recipe whose ``grader``, ``grading`` and ``spread`` sections grade (required).
- ``out``: the folder for ``grading.jsonl`` and ``whileai_verl.json`` (default: ``whileai/`` in
  ``trainer.default_local_dir``), read by ``whileai report``.
- ``group_wait_s``: how long a group may wait for its last response (default 900).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from whileai.config.signal import config_value, verl_signal_problems
from whileai.errors import BadInput
from whileai.grading.group import GradedGroup
from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.rewards import verifier_reward
from whileai.integrations.groups import GroupCollector, Response

__all__ = ["WhileaiRewardManager", "grading_from_recipe"]

DEFAULT_GROUP_WAIT_S = 900.0


def grading_from_recipe(recipe: str | os.PathLike[str], out: Path | None = None) -> GroupwiseGrading:
    """The ``GroupwiseGrading`` a whileai recipe's ``grader``, ``grading`` and ``spread`` sections describe (a judge
    in reward mode keeps the rubrics it writes in ``out/rubrics.json``)."""
    from whileai.config import load_recipe
    from whileai.grading.build import build_grading

    loaded = load_recipe(Path(recipe), [])
    return build_grading(loaded, rubrics_path=None if out is None else out / "rubrics.json")


def _options(config: Any) -> dict[str, Any]:
    kwargs = config_value(config, "reward.reward_kwargs", None)
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise BadInput(f"reward.reward_kwargs is {type(kwargs).__name__}, not a mapping")
    return dict(kwargs)


class _GradingLog:
    """Appends each answered group to ``grading.jsonl`` and keeps ``whileai_verl.json`` (the figures) current."""

    def __init__(self, out: Path, figures: Callable[[], dict[str, Any]]) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path, self.summary, self.figures = out / "grading.jsonl", out / "whileai_verl.json", figures

    def __call__(self, groups: list[GradedGroup]) -> None:
        now = time.time()
        with self.path.open("a") as handle:
            for group in groups:
                handle.write(json.dumps({"time": now, **group.as_dict()}) + "\n")
        temporary = self.summary.with_suffix(".tmp")
        temporary.write_text(json.dumps({"trainer": "verl", **self.figures()}, indent=2) + "\n")
        temporary.replace(self.summary)


@register("whileai")
class WhileaiRewardManager(RewardManagerBase):
    """verl's reward manager ``whileai``: the verifier's reward, reshaped by the recipe's groupwise grader.

    verl builds it on each reward worker as ``cls(config, tokenizer, compute_score, reward_router_address=...,
    reward_model_tokenizer=...)``. It refuses a config that would move the advantages off equation 3 or split
    groups between reward workers (``whileai.config.signal.verl_signal_problems``).

    Args:
        config: verl's whole config (``reward.reward_kwargs`` holds whileai's options).
        tokenizer: the policy's tokenizer, which decodes prompts and responses.
        compute_score: the verifier (``reward.custom_reward_function``); None takes verl's default scorer.
        grading: a ``GroupwiseGrading`` to use instead of the recipe's (from Python).

    Raises:
        BadInput: a config ``verl_signal_problems`` refuses, or a missing or bad recipe.
    """

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Callable[..., Any] | None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        *,
        grading: GroupwiseGrading | None = None,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        problems = verl_signal_problems(config)
        if problems:
            raise BadInput(f"whileai's reward manager: verl would not train on equation 3: {'; '.join(problems)}")
        if compute_score is None:
            from verl.utils.reward_score import default_compute_score

            compute_score = default_compute_score
        self.compute_score = compute_score
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        options = _options(config)
        unknown = sorted(set(options) - {"recipe", "out", "group_wait_s"})
        if unknown:
            raise BadInput(f"reward.reward_kwargs: unknown option(s) {', '.join(unknown)} (recipe, out, group_wait_s)")
        out_option = options.get("out")
        if out_option is None:
            out = Path(str(config_value(config, "trainer.default_local_dir", "checkpoints"))) / "whileai"
        else:
            out = Path(str(out_option))
        if grading is None:
            recipe = options.get("recipe")
            if recipe is None:
                raise BadInput(
                    "reward.reward_kwargs.recipe is not set: whileai's reward manager grades with a recipe's grader "
                    "(+reward.reward_kwargs.recipe=path/to/recipe.yaml)"
                )
            if not Path(str(recipe)).is_absolute() and not Path(str(recipe)).is_file():
                raise BadInput(
                    f"reward.reward_kwargs.recipe={recipe}: no such file from {Path.cwd()} (a reward worker's working "
                    "folder need not be yours: give an absolute path)"
                )
            grading = grading_from_recipe(str(recipe), out)
        wait = options.get("group_wait_s", DEFAULT_GROUP_WAIT_S)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait > 0:
            raise BadInput(f"reward.reward_kwargs.group_wait_s must be a number of seconds > 0, got {wait!r}")
        self.grading = grading
        self.out = out
        size = int(config_value(config, "actor_rollout_ref.rollout.n"))
        self.collector = GroupCollector(
            grading,
            size,
            wait_s=float(wait),
            on_graded=_GradingLog(out, lambda: self.collector.figures()),
            say=print,
        )
        from whileai.judge.grader import judge_plan

        print(f"whileai: verl reward manager: {grading!r}, groups of {size} by uid (at most {wait:g} s), log in {out}")
        if (plan := judge_plan(grading.grader)) is not None:
            print(f"whileai: {plan}")

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """One session's reward: ``{"reward_score": A'_i + mean(R), "reward_extra_info": {...}}``, once its group is
        graded. The extra info holds the verifier's own fields (``acc`` for a plain number, as verl's naive manager
        writes), ``whileai_reward`` (R), ``whileai_group`` (the uid), ``whileai_member`` (the response's place in its
        group's line of ``grading.jsonl``) and ``whileai_fallback`` (empty, or why the group kept its verifier
        rewards)."""
        item = data[-1:][0]  # a session of several outputs is scored on its last, as verl's own managers do
        extras = item.non_tensor_batch
        uid = extras.get("uid")
        if uid is None:
            raise BadInput(
                "whileai's reward manager: a response without a 'uid' (verl groups a prompt's responses by it)"
            )
        loop = asyncio.get_running_loop()
        prompt, completion = await loop.run_in_executor(None, self._texts, item)
        extra_info = dict(extras.get("extra_info") or {})
        tool_fields = extras.get("tool_extra_fields")
        if tool_fields is not None:
            extra_info.update(tool_fields.items())
        extra_info["num_turns"] = extras.get("__num_turns__")
        extra_info["rollout_reward_scores"] = extras.get("reward_scores", {})
        reward_model = extras.get("reward_model") or {}
        keywords: dict[str, Any] = {
            "data_source": extras.get("data_source"),
            "solution_str": completion,
            "ground_truth": reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None,
            "extra_info": extra_info,
        }
        if self.reward_router_address is not None:
            keywords["reward_router_address"] = self.reward_router_address
            keywords["reward_model_tokenizer"] = self.reward_model_tokenizer
        if inspect.iscoroutinefunction(self.compute_score):
            result = await self.compute_score(**keywords)
        else:
            result = await loop.run_in_executor(None, lambda: self.compute_score(**keywords))
        if isinstance(result, Mapping):
            if "score" not in result:
                raise ValueError(f"the verifier returned a dict without 'score' (keys: {', '.join(map(str, result))})")
            score, info = result["score"], dict(result)
        else:
            score, info = result, {"acc": result}
        try:
            reward = verifier_reward(score)
        except ValueError as error:
            raise ValueError(f"the verifier's output: {error}") from None
        task = extra_info.get("task_id", extra_info.get("scenario_id"))
        shaped = await self.collector.reward(
            str(uid), Response(reward, prompt, completion, None if task is None else str(task))
        )
        info.update(
            whileai_reward=reward,
            whileai_group=str(uid),
            whileai_member=shaped.member,
            whileai_fallback=shaped.fallback,
        )
        return {"reward_score": shaped.value, "reward_extra_info": info}

    def _texts(self, item: Any) -> tuple[Any, str]:
        """The prompt (verl's ``raw_prompt`` messages when the batch has them, else its decoded ids) and the decoded
        response, without padding or special tokens."""
        batch = item.batch
        responses = batch["responses"]
        mask = batch["attention_mask"]
        length = responses.shape[-1]
        completion = self.tokenizer.decode(responses[: int(mask[-length:].sum())], skip_special_tokens=True)
        raw = item.non_tensor_batch.get("raw_prompt")
        if raw is not None:
            prompt = raw.tolist() if isinstance(raw, np.ndarray) else raw
        else:
            prompts = batch["prompts"]
            kept = int(mask[: prompts.shape[-1]].sum())
            prompt = self.tokenizer.decode(prompts[prompts.shape[-1] - kept :], skip_special_tokens=True)
        return prompt, completion
