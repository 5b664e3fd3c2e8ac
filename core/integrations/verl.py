"""verl's side of groupwise grading: the reward manager ``whileai``, for verl 0.9's reward loop.

verl 0.9 (``verl/experimental/reward_loop``) scores each response when its rollout ends, on a reward worker (a Ray
actor, one of ``reward.num_workers``, picked at random), by ``await manager.run_single(data)`` with ``data`` one
session's rows; the score lands on the response's last token (``rm_scores``), and ``compute_grpo_outcome_advantage``
sums each response's token rewards and subtracts its ``uid`` group's mean (``norm_adv_by_std_in_grpo=False``).
:class:`GroupwiseRewardManager` decodes the response and scores it with the verifier (verl's
``compute_score(data_source, solution_str, ground_truth, extra_info)``) where it is, then sends it to the run's
:class:`Groups`, which holds it until its group is whole and graded and answers ``A'_i + mean(R)``, so verl's mean
subtraction yields equation 3. Under Ray, ``Groups`` is one named actor that every reward worker sends to (the responses
of a group meet there whichever worker verl picked); outside Ray (a test, a notebook) it lives in the manager.

This module is the library's half: :class:`GroupwiseRewardManager` grades with a ``GroupwiseGrading`` given from
Python and reads no recipe. The recipe's half, the manager verl's registry knows as ``whileai`` (it builds the
grading from ``recipe``) and the :class:`Preflight` callback, is ``whileai.config.verl``, the ``verl.plugins`` entry
point.

Options (``+reward.reward_kwargs.NAME=VALUE`` on verl's own config; without the ``+`` on
``configs/verl/whileai_grpo.yaml``, which declares them):

- ``recipe``: the whileai recipe whose ``grader``, ``grading`` and ``spread`` sections grade (required; an absolute
  path, since a reward worker's working folder need not be yours).
- ``out``: the folder for ``grading.jsonl`` and ``whileai_verl.json`` (default: ``whileai/`` in
  ``trainer.default_local_dir``), read by ``whileai report``.
- ``group_wait_s``: how long a group may wait for its last response (default 900).
- ``verifier_keys``: the keys of a dict verifier's answer, besides ``score`` and ``acc``, to keep in verl's extra
  info (``[pred]``). verl makes one column of each key of a batch's first response, reads it from every response
  and concatenates the agent workers' batches only if their keys agree, so every response carries the same keys:
  ``score``, ``acc``, these (None where an answer lacks one) and whileai's own; a key not declared is left out,
  said once.

The shipped config (``configs/verl/whileai_grpo.yaml``) runs ``whileai.config.verl.Preflight`` as a Hydra callback: a
refused setting, a bad option or a recipe that does not load stops ``main_ppo`` before Ray starts. verl 0.9.1 offers no
earlier hook than the reward worker's start for a run on its own config: there the manager refuses on the first
reward call, after the model has loaded.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from whileai.defaults import GROUP_WAIT_S
from whileai.errors import BadInput, Recurring, WatchStopped, describe
from whileai.grading.group import GradedGroup
from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.guard import config_value, verl_signal_problems
from whileai.grading.knobs import first_problem
from whileai.grading.watch import SpreadWatch, WatchLog, WatchSettings
from whileai.integrations.collector import GroupCollector, Response, Shaped
from whileai.progress import visible
from whileai.rows.verdicts import Verdict, VerifierFailures, raised, read_verdict, verdict_of

__all__ = ["GROUPS_ACTOR", "Groups", "GroupwiseRewardManager", "check_config"]

# The named Ray actor the reward workers of a run share (named actors are per Ray namespace: one per job).
GROUPS_ACTOR = "whileai_groups"
# Calls it holds at once: every response of a step may wait there for its group.
GROUPS_ACTOR_CONCURRENCY = 1_000_000
_OPTIONS = ("recipe", "out", "group_wait_s", "verifier_keys")
# The keys of every response's extra info, in this order, around the declared verifier_keys.
_VERIFIER_FIELDS = ("score", "acc")
_WHILEAI_FIELDS = ("whileai_reward", "whileai_group", "whileai_member", "whileai_fallback")
GROUPS_ACTOR_START_S = 300.0
# A full group waits for the grading thread, which works through the groups queued before it: a response gives up on
# the actor after this many times group_wait_s, and keeps its verifier reward.
GROUPS_ANSWER_FACTOR = 2.0


def _say(line: str) -> None:
    """A line on verl's log (its worker's stdout), the verifier's and grader's text in it shown as text."""
    print(visible(line))


class _GradingLog:
    """Appends each answered group to ``grading.jsonl`` and keeps ``whileai_verl.json`` (the figures) current."""

    def __init__(self, out: Path, figures: Callable[[], dict[str, Any]]) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path, self.summary, self.figures = out / "grading.jsonl", out / "whileai_verl.json", figures
        # A groups actor made after one was lost (or a run again in this folder) counts from zero: the figures
        # already written are kept, under "earlier".
        self.earlier: dict[str, Any] | None = None
        if self.summary.is_file():
            try:
                self.earlier = json.loads(self.summary.read_text())
            except (OSError, ValueError):
                self.earlier = None

        self._lock = threading.Lock()  # the grading thread and the actor's event loop both write the figures

    def __call__(self, groups: list[GradedGroup]) -> None:
        now = time.time()
        with self.path.open("a") as handle:
            for group in groups:
                handle.write(json.dumps({"time": now, **group.as_dict()}) + "\n")
        self.write_figures()

    def write_figures(self) -> None:
        earlier = {} if self.earlier is None else {"earlier": self.earlier}
        with self._lock:
            temporary = self.summary.with_suffix(".tmp")
            temporary.write_text(json.dumps({"trainer": "verl", **self.figures(), **earlier}, indent=2) + "\n")
            temporary.replace(self.summary)


class VerlSettings(BaseModel):
    """What the manager runs with: whileai's options from ``reward.reward_kwargs`` (the module docstring says what
    each is for), and what it reads of the rest of verl's config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str | None = Field(None, description="The recipe whose grader grades, as an absolute path.")
    out: str = Field(description="The folder of grading.jsonl and whileai_verl.json.")
    group_wait_s: float = Field(
        GROUP_WAIT_S, gt=0, strict=True, allow_inf_nan=False, description="Seconds a group may wait for its last one."
    )
    verifier_keys: list[str] = Field(
        default_factory=list, description="A dict verifier's keys, besides score and acc, kept in verl's extra info."
    )
    group_size: int = Field(ge=1, description="actor_rollout_ref.rollout.n: the responses of a group.")
    groups_per_step: int = Field(1, ge=1, description="data.train_batch_size: the groups of a training step.")

    @field_validator("verifier_keys")
    @classmethod
    def _names_whileai_leaves(cls, keys: list[str]) -> list[str]:
        taken = sorted(set(keys) & {*_VERIFIER_FIELDS, *_WHILEAI_FIELDS})
        if taken:
            raise ValueError(f"{', '.join(taken)} always written; list only the others")
        if len(set(keys)) != len(keys):
            raise ValueError(f"a key is listed twice: {keys}")
        return keys


def _settings(config: Any) -> VerlSettings:
    """whileai's options from ``reward.reward_kwargs``, checked, with the group size and the log folder."""
    kwargs = config_value(config, "reward.reward_kwargs", None)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise BadInput(f"reward.reward_kwargs is {type(kwargs).__name__}, not a mapping")
    # One by one: a value left ``???`` in the shipped config (the recipe) reads as missing, not as an OmegaConf error.
    options = {str(key): config_value(kwargs, str(key)) for key in (kwargs or {})}
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise BadInput(f"reward.reward_kwargs: unknown option(s) {', '.join(unknown)} ({', '.join(_OPTIONS)})")
    options = {key: value for key, value in options.items() if value is not None}
    if hasattr(options.get("verifier_keys"), "__iter__") and not isinstance(options["verifier_keys"], (str, Mapping)):
        options["verifier_keys"] = [str(key) for key in options["verifier_keys"]]  # an OmegaConf list, as names
    out = options.get("out") or Path(str(config_value(config, "trainer.default_local_dir", "checkpoints"))) / "whileai"
    options["out"] = str(Path(str(out)).resolve())
    if options.get("recipe") is not None:
        options["recipe"] = str(Path(str(options["recipe"])).resolve())  # the same file on the actor's node
    options["group_size"] = config_value(config, "actor_rollout_ref.rollout.n")
    options["groups_per_step"] = config_value(config, "data.train_batch_size", 1) or 1
    try:
        return VerlSettings.model_validate(options)
    except ValidationError as error:
        where = "" if error.errors()[0]["loc"][0] in ("group_size", "groups_per_step") else "reward.reward_kwargs."
        raise BadInput(first_problem(error, VerlSettings, where)) from None


def _check_recipe(recipe: str | None) -> None:
    if recipe is None:
        raise BadInput(
            "reward.reward_kwargs.recipe is not set: whileai's reward manager grades with a recipe's grader "
            "(+reward.reward_kwargs.recipe=/path/to/recipe.yaml)"
        )
    if not Path(recipe).is_file():
        raise BadInput(
            f"reward.reward_kwargs.recipe={recipe}: no such file here (working folder {Path.cwd()}; Hydra's and a "
            "reward worker's need not be yours: give an absolute path)"
        )


def check_config(config: Any, *, recipe: bool = True) -> VerlSettings:
    """Everything whileai can check of verl's config before anything starts, one place for the managers and
    ``Preflight``: the settings that keep verl on equation 3 (``verl_signal_problems``), whileai's options and
    (``recipe``) that the recipe is named and there (``whileai.config.verl`` loads it). Returns the options read.

    Raises:
        BadInput: the first thing found, named with its override.
    """
    problems = verl_signal_problems(config)
    if problems:
        raise BadInput(f"whileai's reward manager: verl would not train on equation 3: {'; '.join(problems)}")
    settings = _settings(config)
    if recipe:
        _check_recipe(settings.recipe)
    return settings


class Groups:
    """Where a run's responses wait for their groups: a ``GroupwiseGrading`` and a ``GroupCollector``, with
    ``grading.jsonl``. Under Ray one named actor of this class serves every reward worker of the run.

    Args:
        settings: what the manager read from verl's config.
        grading: the run's ``GroupwiseGrading``.
        watch: the spread watch's settings (None: no watch).
        seed: the controls' shuffles, as a recipe's ``spread.seed`` sets them in TRL's runs.
    """

    def __init__(
        self, settings: VerlSettings, grading: GroupwiseGrading, watch: WatchSettings | None = None, seed: int = 0
    ) -> None:
        out = Path(settings.out)
        self.grading = grading
        self.log = _GradingLog(out, self.figures)
        self.watch = _VerlWatch(grading, watch, settings, out, seed) if watch is not None and watch.enabled else None
        self.collector = GroupCollector(
            grading,
            settings.group_size,
            wait_s=settings.group_wait_s,
            on_graded=self.log,
            say=print,
            watch=None if self.watch is None else self._watch_batch,
        )
        self.verifier_failures = 0
        self.actor_lost = 0
        size, wait = settings.group_size, settings.group_wait_s
        _say(f"whileai: verl groups: {grading!r}, {size} responses by uid (at most {wait:g} s), logged in {out}")

    async def reward(
        self,
        key: str,
        reward: float,
        prompt: Any,
        completion: str,
        task: str | None,
        failed: bool = False,
        answered: bool = False,
    ) -> Shaped:
        """A response's share of its group's reward. ``failed``: its verifier gave no reward; ``answered``: a
        reward worker answered it with its verifier reward when the actor before this one was lost, and sends it
        so that its group fills (and falls back) instead of waiting ``group_wait_s``. Both counted here, where the
        run's figures are."""
        self.verifier_failures += failed
        self.actor_lost += answered
        response = Response(reward, prompt, completion, task, answered=answered)
        shaped = await self.collector.reward(key, response)
        if shaped.member < 0 or answered:  # no group's log line counts it
            self._write_figures()
        if self.watch is not None and self.watch.watch.stop_requested:
            return replace(shaped, stop=self.watch.stop_reason())
        return shaped

    def _watch_batch(self, graded: list[GradedGroup], prompts: list[Any], completions: list[Any]) -> None:
        """The watch's turn after a batch is logged (on the grading thread), then the figures with its checks."""
        assert self.watch is not None
        self.watch(graded, prompts, completions)
        self._write_figures()

    def _write_figures(self) -> None:
        try:
            self.log.write_figures()
        except OSError as error:  # a full disk must not stop training
            _say(f"whileai: could not write {self.log.summary}: {describe(error)}")

    def figures(self) -> dict[str, Any]:
        figures = self.collector.figures()
        figures.update(verifier_failures=self.verifier_failures, groups_actor_lost=self.actor_lost)
        if self.watch is not None and (watched := self.watch.watch.summary()) is not None:
            figures["watch"] = watched
        return figures


class _VerlWatch:
    """The spread watch in verl (``whileai.grading.watch``): verl hands a reward manager no step, so a step is
    ``data.train_batch_size`` graded groups, in the order the groups actor grades them (validation groups count as
    well); the checks go to ``watch.jsonl`` beside ``grading.jsonl`` and into ``whileai_verl.json``."""

    def __init__(
        self, grading: GroupwiseGrading, settings: WatchSettings, options: VerlSettings, out: Path, seed: int = 0
    ) -> None:
        self.per_step = options.groups_per_step
        self.size = options.group_size
        self.groups = 0
        self.watch = SpreadWatch(grading, settings, say=print, on_check=WatchLog(out / "watch.jsonl"), seed=seed)

    def __call__(self, graded: list[GradedGroup], prompts: list[Any], completions: list[Any]) -> None:
        for index, group in enumerate(graded):
            members = slice(index * self.size, (index + 1) * self.size)
            step = self.groups // self.per_step + 1
            self.watch.keep(step, [group], prompts[members], completions[members], self.size)
            self.groups += 1
        self.watch.check_through(self.groups // self.per_step)

    def stop_reason(self) -> str:
        first = next((c for c in self.watch.checks if c.stop), self.watch.checks[-1])  # when it first asked
        return f"step {first.step}: {first.why}"


def _inside_ray() -> bool:
    try:
        import ray
    except ImportError:  # pragma: no cover - verl imports ray
        return False
    return bool(ray.is_initialized())


def _groups_actor(settings: VerlSettings, groups: type) -> Any:
    """The run's ``groups`` actor (a ``Groups`` that builds its own grading from ``settings``), created by the first
    reward worker that asks and found by the others."""
    import ray

    remote = ray.remote(groups).options(
        name=GROUPS_ACTOR,
        get_if_exists=True,
        max_concurrency=GROUPS_ACTOR_CONCURRENCY,
        num_cpus=0,  # placed even where the trainer holds every CPU: its work is waiting, and calls to a judge
    )
    handle = remote.remote(settings)
    try:  # a recipe the actor cannot build, or a log folder it cannot write, is said here, before the first step
        ray.get(handle.__ray_ready__.remote(), timeout=GROUPS_ACTOR_START_S)
    except Exception as error:
        raise BadInput(f"whileai's groups actor did not start: {describe(error)}") from None
    return handle


class GroupwiseRewardManager(RewardManagerBase):
    """A verl reward manager: the verifier's reward, reshaped by a groupwise grader.

    Given ``grading`` it grades with it, in this process. verl's registered manager ``whileai``
    (``whileai.config.verl``) names instead a ``Groups`` class that builds its grading from the run's recipe
    (``recipe_groups``); under Ray one named actor of that class serves every reward worker.

    verl builds it on each reward worker as ``cls(config, tokenizer, compute_score, reward_router_address=...,
    reward_model_tokenizer=...)``. It refuses a config that would move the advantages off equation 3 or keep
    groups from forming (``whileai.grading.guard.verl_signal_problems``): the reward worker then fails to start,
    with the message.

    Args:
        config: verl's whole config (``reward.reward_kwargs`` holds whileai's options).
        tokenizer: the policy's tokenizer, which decodes prompts and responses.
        compute_score: the verifier (``reward.custom_reward_function``); None takes verl's default scorer.
        grading: the ``GroupwiseGrading`` to grade with (from Python; outside Ray), else the recipe's.

    Raises:
        BadInput: a config ``verl_signal_problems`` refuses, a bad option, or a missing or bad recipe.
    """

    recipe_groups: type | None = None  # a Groups class built from the settings alone: the recipe's grading

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
        if grading is None and self.recipe_groups is None:
            raise BadInput(
                "GroupwiseRewardManager grades with the grading it is given (grading=GroupwiseGrading(...)); verl's "
                "manager 'whileai' (whileai.config.verl) grades with a recipe's"
            )
        self.settings = check_config(config, recipe=grading is None)
        if compute_score is None:
            from verl.utils.reward_score import default_compute_score

            compute_score = default_compute_score
        self.compute_score = compute_score
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        self.failures = VerifierFailures(_say, compute_score)
        self.groups_errors = Recurring()
        self._left_out: set[str] = set()
        self._reconnect = asyncio.Lock()
        self._remote = grading is None and _inside_ray()
        if grading is not None:
            self.groups: Any = Groups(self.settings, grading)
        elif self._remote:
            self.groups = _groups_actor(self.settings, self.recipe_groups)
        else:
            self.groups = self.recipe_groups(self.settings)

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """One session's reward: ``{"reward_score": A'_i + mean(R), "reward_extra_info": {...}}``, once its group is
        graded. The extra info has the same keys for every response, in this order: ``score`` (R, None when the
        verifier gave no reward), ``acc`` (a dict answer's own, else R), the declared ``verifier_keys`` (None where
        an answer lacks one), ``whileai_reward`` (R), ``whileai_group`` (the uid), ``whileai_member`` (the
        response's place in its group's line of ``grading.jsonl``, as text) and ``whileai_fallback`` (empty, or
        why the group kept its verifier rewards).

        A verifier that raises, or answers something that is not a reward, makes this response unscorable (its
        advantage 0), counted and said on the reward worker's log: the rest of its group does not wait out
        ``group_wait_s`` for it.
        """
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
        verdict = await self._verify(extras, completion, extra_info)
        if verdict.error:
            self.failures(verdict.error)
        task = extra_info.get("task_id", extra_info.get("scenario_id"))
        arguments = (str(uid), verdict.reward, prompt, completion, None if task is None else str(task))
        if self._remote:
            shaped = await self._remote_reward(arguments, bool(verdict.error))
        else:
            shaped = await self.groups.reward(*arguments, bool(verdict.error))
        if shaped.stop:  # spread.watch.on_fail: stop, patience failed checks in a row: the run ends here
            raise WatchStopped(
                f"whileai: the spread watch stopped training ({shaped.stop}); watch.jsonl in {self.settings.out} "
                "has each check. Change the recipe's grader, then resume from verl's last checkpoint"
            )
        return {"reward_score": shaped.value, "reward_extra_info": self._fields(verdict, shaped)}

    async def _remote_reward(self, arguments: tuple[Any, ...], failed: bool) -> Shaped:
        """The groups actor's answer; if it is lost (killed, its node gone) a new one is made for the responses
        after this one, and this one keeps its verifier reward, counted on the new actor."""
        import ray

        limit = GROUPS_ANSWER_FACTOR * self.settings.group_wait_s
        groups = self.groups
        try:
            return await asyncio.wait_for(groups.reward.remote(*arguments, failed), timeout=limit)
        except Exception as error:  # the actor died (a node lost, out of memory) or hangs: R, said, counted
            if self.groups_errors.add():
                _say(f"whileai: the groups actor failed ({self.groups_errors.count} so far): {describe(error)}")
            if isinstance(error, ray.exceptions.RayActorError):
                await self._replace_groups(groups)
                if self.groups is not groups:  # its group's other responses go to the new actor: it fills there
                    self.groups.reward.remote(*arguments, failed, True)
            value = arguments[1] if math.isfinite(arguments[1]) else 0.0
            return Shaped(value, arguments[0], fallback="groups actor failed")

    async def _replace_groups(self, lost: Any) -> None:
        """A new groups actor in place of ``lost`` (the first reward worker to ask makes it, the others find it)."""
        async with self._reconnect:
            if self.groups is not lost:  # another call of this worker has replaced it already
                return
            try:
                self.groups = await asyncio.get_running_loop().run_in_executor(
                    None, _groups_actor, self.settings, self.recipe_groups
                )
                print("whileai: the groups actor was lost; a new one grades the groups from here on")
            except Exception as error:
                _say(f"whileai: no new groups actor ({describe(error)}); the next response tries again")

    def _fields(self, verdict: Verdict, shaped: Shaped) -> dict[str, Any]:
        """The response's extra info: the same keys, in the same order, whatever the verifier answered."""
        reward = verdict.reward if math.isfinite(verdict.reward) else None
        answer = verdict.fields
        left_out = set(answer) - {*_VERIFIER_FIELDS, *self.settings.verifier_keys} - self._left_out
        if left_out:
            self._left_out |= left_out
            names = ",".join(sorted(left_out))
            _say(
                f"whileai: the verifier's answer has key(s) {names} that verl will not see: verl needs every "
                f"response to carry the same keys; declare them with +reward.reward_kwargs.verifier_keys=[{names}]"
            )
        fields: dict[str, Any] = {"score": reward, "acc": answer.get("acc") if answer else reward}
        fields.update((key, answer.get(key)) for key in self.settings.verifier_keys)
        fields.update(
            whileai_reward=reward,
            whileai_group=shaped.group,
            whileai_member=str(shaped.member),
            whileai_fallback=shaped.fallback,
        )
        return fields

    async def _verify(self, extras: Mapping[str, Any], completion: str, extra_info: dict[str, Any]) -> Verdict:
        """The verifier's verdict on the response (``whileai.rows.verdicts``: never raises)."""
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
            try:
                return read_verdict(await self.compute_score(**keywords))
            except Exception as error:
                return raised(error)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, verdict_of, lambda: self.compute_score(**keywords))

    def _texts(self, item: Any) -> tuple[Any, str]:
        """The prompt (verl's ``raw_prompt`` messages when the batch has them, else its decoded ids) and the decoded
        response, without padding or special tokens.

        verl's reward loop hands over ``prompt_len`` and ``response_len`` (its rows are padded on the right, the
        attention mask all ones where a row is longest); a batch without them (verl's batch path) has prompts padded
        on the left and responses on the right, read by the attention mask.
        """
        batch, extras = item.batch, item.non_tensor_batch
        prompts, responses, mask = batch["prompts"], batch["responses"], batch["attention_mask"]
        width = prompts.shape[-1]
        response_len, prompt_len = extras.get("response_len"), extras.get("prompt_len")
        length = int(response_len) if response_len is not None else int(mask[width:].sum())
        completion = self.tokenizer.decode(responses[:length], skip_special_tokens=True)
        raw = extras.get("raw_prompt")
        if raw is not None:
            prompt = raw.tolist() if isinstance(raw, np.ndarray) else raw
        elif prompt_len is not None:
            prompt = self.tokenizer.decode(prompts[: int(prompt_len)], skip_special_tokens=True)
        else:
            kept = int(mask[:width].sum())
            prompt = self.tokenizer.decode(prompts[width - kept :], skip_special_tokens=True)
        return prompt, completion
