"""The judge as graders for ``GroupwiseGrading``: ``JudgeGrader`` (advantage mode), and ``build_judge`` that makes
the grader a ``JudgeConfig`` and a mode ask for (reward mode's roles are in ``whileai.judge.rubrics``).

``JudgeGrader.grade_groups`` asks every call of a batch at once: for each group and display order, the judge sees
the task and every rollout under an anonymous label with the verifier's verdict, in a seeded random order, and ranks
the passes best first, or scores them (``answer_form``), in one call or one call a pass (``score_calls``). Labels are
checked (no failure ranked, no pass left out, no label invented or repeated) and mapped back to group indices. A
ranking's orders are aggregated by mean rank; continuous scores (read from the judge's token probabilities, or one a
call) by mean score, differences within the group's order noise tied (``whileai.judge.pass_scores``). A hack needs a
majority of the orders; the orders' agreement (Kendall's tau), the scores read from probabilities and the mean score
by display slot go to the stats.

A call that fails or an answer that cannot be used comes back as an exception in that group's place, so
``GroupwiseGrading`` falls back and counts it; only an endpoint that answers nothing at all raises
``GraderUnavailable``. The redistribution math, the fallback rules and the spread gate stay in ``whileai.grading``; the
cache and structured output stay in ``whileai.judge.client``, what a call is and how it is retried in
``whileai.http.endpoint``, HTTP in ``whileai.http.client``. A recipe's judge becomes a ``GroupwiseGrading`` in
``whileai.config.build``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from whileai.errors import BadInput, GraderUnavailable
from whileai.judge.base import JudgeBase, failure_reason
from whileai.judge.cache import cache_key
from whileai.judge.client import CallSpec, JudgeClient
from whileai.judge.orders import consensus_tiers, display_orders, fractional_ranks, mean_kendall_tau
from whileai.judge.pass_scores import GroupScoresReader, OnePassReader, assemble_scores, slot_scores
from whileai.judge.prompts import (
    AnswerShape,
    RolloutView,
    check_rate,
    check_rate_one,
    group_messages,
    rollout_labels,
)
from whileai.judge.replies import (
    JudgeAnswerError,
    RankingReply,
    check_ranking,
    check_scores,
    one_pass_schema,
    ranking_schema,
    read_reply,
    read_scores,
    scores_schema,
)
from whileai.judge.rubrics import JudgeRubricWriter, JudgeScorer
from whileai.judge.settings import JudgeConfig

__all__ = [
    "JudgeGrader",
    "JudgeRubricWriter",
    "JudgeScorer",
    "build_judge",
    "judge_config",
]


@lru_cache(maxsize=1024)
def _ranking_schema(pass_labels: tuple[str, ...], labels: tuple[str, ...]) -> dict[str, Any]:
    """``ranking_schema`` of a group's labels (a group of G shows one of at most 2**G pass patterns)."""
    return ranking_schema(pass_labels, labels)


@lru_cache(maxsize=1024)
def _scores_schema(
    pass_labels: tuple[str, ...], layout: str, top: int, hacks: bool, reasons: bool = True
) -> dict[str, Any]:
    """``scores_schema`` of a group's passing labels in the prompts' answer shape."""
    return scores_schema(pass_labels, layout, top, hacks, reasons)


@lru_cache(maxsize=64)
def _one_pass_schema(top: int, reasons: bool) -> dict[str, Any]:
    return one_pass_schema(top, reasons)


def _joined(answers: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The answers of one order's calls, one a pass, as one answer of every pass."""
    if any(a is None for a in answers):
        return None
    joined: dict[str, Any] = {"scores": {}, "sd": {}, "sampled": [], "hacks": [], "reasons": {}}
    for answer in answers:
        for key in ("scores", "sd", "reasons"):
            joined[key].update(answer[key])  # type: ignore[index]
        joined["sampled"] += answer["sampled"]  # type: ignore[index]
    return joined


@dataclass
class _OrderPlan:
    """One display order of one group: its calls (one, or one a pass with ``score_calls: pass``) and how its labels
    map back to group indices."""

    order: list[int]
    label_to_index: dict[str, int]
    specs: list[CallSpec]


class _RankingReader:
    """``CallSpec.read`` for one display order (a class, not a closure, so each keeps its own labels); ``quoted``:
    the rollouts shown, whose JSON is never read as the judge's answer."""

    def __init__(self, pass_labels: list[str], fail_labels: list[str], quoted: Sequence[str]) -> None:
        self.pass_labels, self.fail_labels, self.quoted = pass_labels, fail_labels, quoted

    def __call__(self, text: str | None) -> dict[str, Any]:
        checked = check_ranking(read_reply(text, RankingReply, self.quoted), self.pass_labels, self.fail_labels)
        return {"tiers": checked.tiers, "hacks": checked.hacks, "reasons": checked.reasons}


class _ScoresReader:
    """``CallSpec.read`` of a score-form call: the scores checked and turned into tiers, as a ranking would be."""

    def __init__(self, pass_labels: list[str], fail_labels: list[str], shape: AnswerShape, quoted: Sequence[str]):
        self.pass_labels, self.fail_labels, self.shape, self.quoted = pass_labels, fail_labels, shape, quoted

    def __call__(self, text: str | None) -> dict[str, Any]:
        reply = read_scores(text, self.shape.layout, self.quoted)
        if not self.shape.hacks:
            reply.hacks = []
        checked = check_scores(reply, self.pass_labels, self.fail_labels, self.shape.top)
        return {"tiers": checked.tiers, "hacks": checked.hacks, "reasons": checked.reasons}


class JudgeGrader(JudgeBase):
    """Advantage mode (GAR): a model ranks each group's passes and names its hacks.

    Args:
        config: a ``JudgeConfig`` or the mapping of its fields.
        client: share another role's client (one pool, one cache, one ``stats``); by default a new one.

    Use it as ``GroupwiseGrading(grader=JudgeGrader(config))``. ``grade_groups`` is what ``GroupwiseGrading``
    calls with a whole batch; calling the object grades one group and raises instead of returning an exception.
    """

    def __init__(self, config: JudgeConfig | Mapping[str, Any], *, client: JudgeClient | None = None) -> None:
        super().__init__(config, client=client)
        # At build time, not at the first batch.
        if self.config.score_calls == "pass":
            check_rate_one(self.prompts)
        elif self.config.answer_form != "ranking":
            check_rate(self.prompts)

    @property
    def continuous(self) -> bool:
        """Whether each pass gets a number of its own (probabilities, or one call a pass) rather than a place."""
        return self.config.answer_form == "probabilities" or self.config.score_calls == "pass"

    def _specs(self, task: str, views: list[RolloutView]) -> list[CallSpec]:
        """The calls of one display order."""
        shape, config = self.prompts.answer, self.config
        pass_labels = [v.label for v in views if v.passed]
        fail_labels = [v.label for v in views if not v.passed]
        quoted = [v.text for v in views]
        top_logprobs = config.top_logprobs if config.answer_form == "probabilities" else 0
        if config.score_calls == "pass":
            schema = _one_pass_schema(shape.top, shape.reasons)
            specs = []
            for label in pass_labels:
                messages = group_messages(self.prompts, "rate_one", task, views, config.max_rollout_chars, label=label)
                key = self._key("rate_one", messages, schema, top_logprobs)
                read = OnePassReader(label, shape.top, quoted)
                specs.append(CallSpec("rate_one", messages, schema, read, key, top_logprobs))
            return specs
        if config.answer_form == "ranking":
            messages = group_messages(self.prompts, "rank", task, views, config.max_rollout_chars)
            schema = _ranking_schema(tuple(pass_labels), tuple(v.label for v in views))
            reader: Any = _RankingReader(pass_labels, fail_labels, quoted)
        else:
            messages = group_messages(self.prompts, "rate", task, views, config.max_rollout_chars)
            schema = _scores_schema(tuple(pass_labels), shape.layout, shape.top, shape.hacks, shape.reasons)
            reader = (GroupScoresReader if self.continuous else _ScoresReader)(pass_labels, fail_labels, shape, quoted)
        return [
            CallSpec("rank", messages, schema, reader, self._key("rank", messages, schema, top_logprobs), top_logprobs)
        ]

    def _plan(self, group: Sequence[Mapping[str, Any]]) -> list[_OrderPlan]:
        items = list(group)
        task = str(items[0].get("prompt", "")) if items else ""
        content = cache_key(task=task, rollouts=[[str(it["completion"]), bool(it["passed"])] for it in items])
        shape = self.prompts.answer
        labels = rollout_labels(len(items), shape.labels)
        plans = []
        for order in display_orders(len(items), self.config.permutations, self.config.seed, content):
            shown = [items[j] for j in order]
            views = [
                RolloutView(labels[pos], bool(it["passed"]), str(it["completion"])) for pos, it in enumerate(shown)
            ]
            plans.append(
                _OrderPlan(
                    [int(it["index"]) for it in shown],
                    {labels[p]: int(it["index"]) for p, it in enumerate(shown)},
                    self._specs(task, views),
                )
            )
        return plans

    def _assemble(self, group: Sequence[Mapping[str, Any]], plans: list[_OrderPlan], answers: list[Any]) -> dict:
        passes = [int(it["index"]) for it in group if it["passed"]]
        if self.continuous:
            labels = [plan.label_to_index for plan in plans]
            band = self.config.tie_within * self.prompts.answer.top
            answer, slots = assemble_scores(passes, [plan.order for plan in plans], labels, answers, band)
            notes = answer["notes"]
            if self.config.answer_form == "probabilities":  # scores asked as written are no shortfall
                self.stats.count_scores(notes["read"], notes["as_written"])
            self.stats.count_slots(slots)
            if notes["agreement"] is not None:
                self.stats.count_agreement(notes["agreement"])
            return answer
        rankings = [
            [[plan.label_to_index[x] for x in tier] for tier in ans["tiers"]]
            for plan, ans in zip(plans, answers, strict=True)
        ]
        flagged = [{plan.label_to_index[x] for x in ans["hacks"]} for plan, ans in zip(plans, answers, strict=True)]
        # A hack must be named in more than half of the orders; otherwise the pass is ranked, last where named.
        hacks = [i for i in passes if 2 * sum(i in f for f in flagged) > len(plans)]
        kept = [i for i in passes if i not in hacks]
        tiers = consensus_tiers(rankings, kept)
        # A place is a score for the position measure: the best pass scores highest.
        places = [{i: -r for i, r in fractional_ranks(ranking).items() if i in kept} for ranking in rankings]
        self.stats.count_slots([slot_scores(plan.order, p) for plan, p in zip(plans, places, strict=True)])
        agreement = None
        if len(plans) > 1:
            agreement = mean_kendall_tau([[*r, sorted(f)] for r, f in zip(rankings, flagged, strict=True)], passes)
            if agreement is not None:
                self.stats.count_agreement(agreement)
        first = plans[0]
        reasons = {str(first.label_to_index[x]): r for x, r in answers[0]["reasons"].items()}
        return {
            "ranking": tiers,
            "hacks": hacks,
            "reasons": reasons,
            "notes": {"orders": [plan.order for plan in plans], "agreement": agreement},
        }

    def grade_groups(
        self, groups: Sequence[Sequence[Mapping[str, Any]]], fresh: bool = False
    ) -> list[dict[str, Any] | Exception]:
        """Each group's answer (``ranking`` best first with ties, ``hacks``, ``reasons`` by index, ``notes`` with
        the display orders and their agreement), or the exception that stands in for it. ``fresh`` asks the
        server past the cache (a check of the judge against itself).

        Raises:
            GraderUnavailable: the endpoint answered no call of the batch.
        """
        plans = [self._plan(group) for group in groups]
        specs = [spec for group_plans in plans for plan in group_plans for spec in plan.specs]
        try:
            outcomes = self.client.run(specs, fresh=fresh)
        except GraderUnavailable:
            for _ in groups:
                self.stats.count_failure("unreachable")
            raise
        results: list[dict[str, Any] | Exception] = []
        position = 0
        for group, group_plans in zip(groups, plans, strict=True):
            answers: list[Any] = []
            error: Exception | None = None
            for plan in group_plans:  # an order's answer, its calls' answers joined
                mine = outcomes[position : position + len(plan.specs)]
                position += len(plan.specs)
                error = error or next((o.error for o in mine if o.error is not None), None)
                answers.append(mine[0].answer if len(mine) == 1 else _joined([o.answer for o in mine]))
            if error is not None:
                self.stats.count_failure(failure_reason(error))
                results.append(error)
                continue
            try:
                results.append(self._assemble(group, group_plans, answers))
            except JudgeAnswerError as exc:
                self.stats.count_failure(failure_reason(exc))
                results.append(exc)
        return results

    def __call__(self, group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """One group's answer; raises the error a batch would have returned in its place."""
        answer = self.grade_groups([group])[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def judge_config(
    settings: JudgeConfig | Mapping[str, Any], base_dir: str | os.PathLike[str] | None = None
) -> JudgeConfig:
    """A ``JudgeConfig`` from a recipe's ``grader.judge`` mapping, its relative paths resolved against ``base_dir``.

    ``prompts`` given as a file path and ``cache_dir`` are relative to the recipe's folder, as every path in a
    recipe is.

    Raises:
        BadInput: a setting that is not valid, naming the field (never echoing a value: it could be a key).
    """
    if isinstance(settings, JudgeConfig):
        config = settings
    else:
        try:
            config = JudgeConfig.model_validate(dict(settings))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "judge"
            raise BadInput(f"grader.judge.{where}: {first['msg']}") from None
    if base_dir is None:
        return config
    base = Path(base_dir)
    update: dict[str, Any] = {}
    if config.prompts.endswith((".yaml", ".yml")) and not Path(config.prompts).expanduser().is_absolute():
        update["prompts"] = str(base / config.prompts)
    if config.cache_dir is not None and not Path(config.cache_dir).expanduser().is_absolute():
        update["cache_dir"] = str(base / config.cache_dir)
    return config.model_copy(update=update) if update else config


def build_judge(
    settings: JudgeConfig | Mapping[str, Any],
    mode: str = "advantage",
    *,
    base_dir: str | os.PathLike[str] | None = None,
    rubrics_path: str | os.PathLike[str] | None = None,
) -> JudgeGrader | JudgeScorer:
    """The judge grader for ``mode``, from a recipe's ``grader.judge`` settings.

    Advantage mode gives a ``JudgeGrader``. Reward mode gives a ``JudgeScorer`` whose ``rubric_writer`` (a
    ``JudgeRubricWriter`` on the same client, storing to ``rubrics_path`` when given) is the ``rubrics`` to hand
    ``GroupwiseGrading`` when the recipe gives none.

    Raises:
        BadInput: invalid settings, an unknown mode, a prompts file that cannot be used, or an ``api_key_env``
            that is not set.
    """
    config = judge_config(settings, base_dir)
    if mode == "advantage":
        return JudgeGrader(config)
    if mode == "reward":
        scorer = JudgeScorer(config)
        scorer.rubric_writer = JudgeRubricWriter(config, path=rubrics_path, client=scorer.client)
        return scorer
    raise BadInput(f"mode must be 'advantage' or 'reward', got {mode!r}")
