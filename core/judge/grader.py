"""The judge as graders for ``GroupwiseGrading``: ``JudgeGrader`` (advantage mode), ``JudgeScorer`` and
``JudgeRubricWriter`` (reward mode), and ``build_judge`` that makes the one a ``JudgeConfig`` and a mode ask for.

``JudgeGrader.grade_groups`` asks one call per group and display order, all of a batch at once: the judge sees the
task and every rollout under an anonymous label with the verifier's verdict, in a seeded random order, and ranks the
passes best first and names confirmed hacks. Labels are checked (no failure ranked, no pass left out, no label
invented or repeated) and mapped back to group indices; several orders are aggregated by mean rank, a hack needs a
majority of the orders, and the orders' agreement (Kendall's tau) goes to the stats. ``JudgeRubricWriter`` writes a
task's rubric from its first group, keeps it per task and stores it as JSON; ``JudgeScorer.score_passes`` scores
each pass against its rubric in [0, 1].

A call that fails or an answer that cannot be used comes back as an exception in that group's place, so
``GroupwiseGrading`` falls back and counts it; only an endpoint that answers nothing at all raises
``GraderUnavailable``. The redistribution math, the fallback rules and the spread gate stay in ``whileai.grading``; the
cache and structured output stay in ``whileai.judge.client``, what a call is and how it is retried in
``whileai.http.endpoint``, HTTP in ``whileai.http.client``. A recipe's judge becomes a ``GroupwiseGrading`` in
``whileai.config.build``."""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from whileai.errors import BadInput, GraderUnavailable
from whileai.judge.cache import cache_key
from whileai.judge.client import CallSpec, JudgeCallError, JudgeClient
from whileai.judge.orders import consensus_tiers, display_orders, mean_kendall_tau
from whileai.judge.prompts import (
    AnswerShape,
    RolloutView,
    check_rate,
    load_prompts,
    rank_messages,
    rate_messages,
    rollout_labels,
    rubric_messages,
    score_messages,
)
from whileai.judge.replies import (
    JudgeAnswerError,
    RankingReply,
    RubricReply,
    ScoreReply,
    check_ranking,
    check_scores,
    ranking_schema,
    read_reply,
    read_scores,
    rubric_schema,
    score_schema,
    scores_schema,
)
from whileai.judge.settings import JudgeConfig
from whileai.judge.usage import JudgeStats

__all__ = [
    "JudgeGrader",
    "JudgeRubricWriter",
    "JudgeScorer",
    "build_judge",
    "judge_config",
]

RUBRICS_FORMAT = "whileai-judge-rubrics/1"


# The JSON schemas sent as response_format, built once: a batch asks the same few shapes many times over. Shared, so
# never changed after they are built (a request body only reads them).
_SCORE_SCHEMA = score_schema()
_RUBRIC_SCHEMA = rubric_schema()


@lru_cache(maxsize=1024)
def _ranking_schema(pass_labels: tuple[str, ...], labels: tuple[str, ...]) -> dict[str, Any]:
    """``ranking_schema`` of a group's labels (a group of G shows one of at most 2**G pass patterns)."""
    return ranking_schema(pass_labels, labels)


@lru_cache(maxsize=1024)
def _scores_schema(pass_labels: tuple[str, ...], layout: str, top: int, hacks: bool) -> dict[str, Any]:
    """``scores_schema`` of a group's passing labels in the prompts' answer shape."""
    return scores_schema(pass_labels, layout, top, hacks)


def _failure_reason(error: Exception) -> str:
    if isinstance(error, JudgeCallError):
        return error.kind
    if isinstance(error, JudgeAnswerError):
        return "unusable answer"
    return type(error).__name__


class _JudgeBase:
    """Config, prompts and client shared by the three judge roles."""

    def __init__(self, config: JudgeConfig | Mapping[str, Any], *, client: JudgeClient | None = None) -> None:
        self.config = config if isinstance(config, JudgeConfig) else JudgeConfig.model_validate(dict(config))
        self.prompts = load_prompts(self.config.prompts)
        self.client = client if client is not None else JudgeClient(self.config)
        self.name = f"judge:{self.config.model}"

    @property
    def stats(self) -> JudgeStats:
        """The judge's counters (shared with every role built on the same client)."""
        return self.client.stats

    def _key(self, kind: str, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        """The cache key of a call: everything that changes what is asked (the model, its sampling, the extra
        fields, how structured output is asked for and the schema, the prompts and the messages); not how it
        travels (streaming, timeouts, retries)."""
        config = self.config
        return cache_key(
            kind=kind,
            model=config.model,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            extra_body=config.extra_body,
            structured_output=config.structured_output,
            schema=schema,
            prompts=self.prompts.version,
            prompts_digest=self.prompts.digest,
            messages=messages,
        )

    def close(self) -> None:
        """Stop the judge's background loop and connection pool (also done at garbage collection)."""
        self.client.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.config.model!r}, base_url={self.config.base_url!r})"


@dataclass
class _OrderPlan:
    """One display order of one group: its call and how its labels map back to group indices."""

    order: list[int]
    label_to_index: dict[str, int]
    spec: CallSpec


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


class JudgeGrader(_JudgeBase):
    """Advantage mode (GAR): a model ranks each group's passes and names its hacks.

    Args:
        config: a ``JudgeConfig`` or the mapping of its fields.
        client: share another role's client (one pool, one cache, one ``stats``); by default a new one.

    Use it as ``GroupwiseGrading(grader=JudgeGrader(config))``. ``grade_groups`` is what ``GroupwiseGrading``
    calls with a whole batch; calling the object grades one group and raises instead of returning an exception.
    """

    def __init__(self, config: JudgeConfig | Mapping[str, Any], *, client: JudgeClient | None = None) -> None:
        super().__init__(config, client=client)
        if self.config.answer_form == "scores":
            check_rate(self.prompts)  # at build time, not at the first batch

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
            pass_labels = [v.label for v in views if v.passed]
            fail_labels = [v.label for v in views if not v.passed]
            if self.config.answer_form == "scores":
                messages = rate_messages(self.prompts, task, views, self.config.max_rollout_chars)
                schema = _scores_schema(tuple(pass_labels), shape.layout, shape.top, shape.hacks)
                reader: Any = _ScoresReader(pass_labels, fail_labels, shape, [v.text for v in views])
            else:
                messages = rank_messages(self.prompts, task, views, self.config.max_rollout_chars)
                schema = _ranking_schema(tuple(pass_labels), tuple(labels))
                reader = _RankingReader(pass_labels, fail_labels, [v.text for v in views])
            spec = CallSpec(
                kind="rank", messages=messages, schema=schema, read=reader, key=self._key("rank", messages, schema)
            )
            plans.append(
                _OrderPlan(
                    [int(it["index"]) for it in shown],
                    {labels[p]: int(it["index"]) for p, it in enumerate(shown)},
                    spec,
                )
            )
        return plans

    def _assemble(self, group: Sequence[Mapping[str, Any]], plans: list[_OrderPlan], answers: list[Any]) -> dict:
        passes = [int(it["index"]) for it in group if it["passed"]]
        rankings = [
            [[plan.label_to_index[x] for x in tier] for tier in ans["tiers"]]
            for plan, ans in zip(plans, answers, strict=True)
        ]
        flagged = [{plan.label_to_index[x] for x in ans["hacks"]} for plan, ans in zip(plans, answers, strict=True)]
        # A hack must be named in more than half of the orders; otherwise the pass is ranked, last where named.
        hacks = [i for i in passes if 2 * sum(i in f for f in flagged) > len(plans)]
        kept = [i for i in passes if i not in hacks]
        tiers = consensus_tiers(rankings, kept)
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
        specs = [plan.spec for group_plans in plans for plan in group_plans]
        try:
            outcomes = self.client.run(specs, fresh=fresh)
        except GraderUnavailable:
            for _ in groups:
                self.stats.count_failure("unreachable")
            raise
        results: list[dict[str, Any] | Exception] = []
        position = 0
        for group, group_plans in zip(groups, plans, strict=True):
            mine = outcomes[position : position + len(group_plans)]
            position += len(group_plans)
            error = next((o.error for o in mine if o.error is not None), None)
            if error is not None:
                self.stats.count_failure(_failure_reason(error))
                results.append(error)
                continue
            results.append(self._assemble(group, group_plans, [o.answer for o in mine]))
        return results

    def __call__(self, group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """One group's answer; raises the error a batch would have returned in its place."""
        answer = self.grade_groups([group])[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _criteria(rubric: Any) -> tuple[list[str], list[str]]:
    """Solution and behavior criteria of a rubric: a ``{"solution", "behavior"}`` mapping, a list, or None."""
    if rubric is None:
        return [], []
    if isinstance(rubric, Mapping):
        unknown = sorted(set(rubric) - {"solution", "behavior"})
        if unknown:
            raise BadInput(f"a rubric has the keys 'solution' and 'behavior', not {unknown[0]!r}")
        solution, behavior = rubric.get("solution", []), rubric.get("behavior", [])
        return ([solution] if isinstance(solution, str) else [str(c) for c in solution]), (
            [behavior] if isinstance(behavior, str) else [str(c) for c in behavior]
        )
    if isinstance(rubric, str):
        return [rubric], []
    if isinstance(rubric, Sequence):
        return [str(c) for c in rubric], []
    raise BadInput(f"a rubric is a mapping of criteria lists or a list of criteria, not {type(rubric).__name__}")


def _read_score(text: str | None, quoted: Sequence[str] = ()) -> dict[str, Any]:
    reply = read_reply(text, ScoreReply, quoted)
    return {"solution": reply.solution, "behavior": reply.behavior, "reason": reply.reason}


class JudgeScorer(_JudgeBase):
    """Reward mode (GRS): a model scores one pass against its task's rubric, solution and behavior in [0, 1].

    Use it as ``GroupwiseGrading(grader=JudgeScorer(config), mode="reward", rubrics=JudgeRubricWriter(...))``, or
    let ``build_judge(config, mode="reward")`` wire both on one client.
    """

    rubric_writer: JudgeRubricWriter | None = None  # set by build_judge: the task rubrics, on the same client

    def _spec(self, item: Mapping[str, Any], rubric: Any) -> CallSpec:
        solution, behavior = _criteria(rubric)
        messages = score_messages(
            self.prompts,
            str(item.get("prompt", "")),
            solution or ["(none given: judge whether the result is correct, complete and precise)"],
            behavior or ["(none given: judge whether the work was direct, honest and free of side effects)"],
            str(item["completion"]),
            self.config.max_rollout_chars,
        )
        read = functools.partial(_read_score, quoted=(str(item["completion"]),))
        return CallSpec("score", messages, _SCORE_SCHEMA, read, self._key("score", messages, _SCORE_SCHEMA))

    def score_passes(
        self, requests: Sequence[tuple[Mapping[str, Any], Any]], fresh: bool = False
    ) -> list[dict[str, Any] | Exception]:
        """``{"solution", "behavior", "reason"}`` for each ``(item, rubric)``, or the exception in its place.
        ``fresh`` asks the server past the cache (a check of the judge against itself: the same pass scored again).

        Raises:
            GraderUnavailable: the endpoint answered no call of the batch.
        """
        specs: list[CallSpec | Exception] = []
        for item, rubric in requests:
            try:
                specs.append(self._spec(item, rubric))
            except BadInput as exc:
                specs.append(exc)
        asked = [s for s in specs if isinstance(s, CallSpec)]
        try:
            outcomes = iter(self.client.run(asked, fresh=fresh))
        except GraderUnavailable:
            for _ in asked:
                self.stats.count_failure("unreachable")
            raise
        results: list[dict[str, Any] | Exception] = []
        for spec in specs:
            if isinstance(spec, Exception):
                self.stats.count_failure("bad rubric")
                results.append(spec)
                continue
            outcome = next(outcomes)
            if outcome.error is not None:
                self.stats.count_failure(_failure_reason(outcome.error))
                results.append(outcome.error)
            else:
                results.append(outcome.answer)
        return results

    def __call__(self, item: Mapping[str, Any], rubric: Any) -> dict[str, Any]:
        """One pass's scores; raises the error a batch would have returned in its place."""
        answer = self.score_passes([(item, rubric)])[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _read_rubric(text: str | None, quoted: Sequence[str] = ()) -> dict[str, Any]:
    reply = read_reply(text, RubricReply, quoted)
    return {"solution": list(reply.solution), "behavior": list(reply.behavior)}


class JudgeRubricWriter(_JudgeBase):
    """Reward mode: writes a task's rubric from the first group seen, keeps one per task, stores them as JSON.

    Args:
        config: a ``JudgeConfig`` or the mapping of its fields.
        path: a JSON file (in the run or cache directory) to load rubrics from if it exists and to save each new
            rubric to; None keeps them in memory (the answer cache still spares repeated calls).
        client: share another role's client.

    ``GroupwiseGrading(rubrics=writer)`` calls ``writer(task_id, group)`` once per task.
    """

    def __init__(
        self,
        config: JudgeConfig | Mapping[str, Any],
        *,
        path: str | os.PathLike[str] | None = None,
        client: JudgeClient | None = None,
    ) -> None:
        super().__init__(config, client=client)
        self.rubrics: dict[str, dict[str, list[str]]] = {}
        self.path = Path(path) if path is not None else None
        if self.path is not None and self.path.exists():
            self.load(self.path)

    def __call__(self, task_id: str, group: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
        """The rubric of ``task_id``, written from ``group`` the first time.

        Raises:
            JudgeCallError, JudgeAnswerError: no usable rubric (``GroupwiseGrading`` falls back for the group and
                asks again on the task's next group).
            GraderUnavailable: the endpoint could not be reached.
        """
        task_id = str(task_id)
        if task_id in self.rubrics:
            return self.rubrics[task_id]
        items = list(group)
        task = str(items[0].get("prompt", "")) if items else ""
        content = cache_key(task=task, rollouts=[[str(it["completion"]), bool(it["passed"])] for it in items])
        order = display_orders(len(items), 1, self.config.seed, content)[0]
        labels = rollout_labels(len(items))
        views = [
            RolloutView(labels[p], bool(items[j]["passed"]), str(items[j]["completion"])) for p, j in enumerate(order)
        ]
        messages = rubric_messages(self.prompts, task, views, self.config.max_rollout_chars)
        read = functools.partial(_read_rubric, quoted=[view.text for view in views])
        spec = CallSpec("rubric", messages, _RUBRIC_SCHEMA, read, self._key("rubric", messages, _RUBRIC_SCHEMA))
        try:
            outcome = self.client.run([spec])[0]
        except GraderUnavailable:
            self.stats.count_failure("unreachable")
            raise
        if outcome.error is not None:
            self.stats.count_failure(f"rubric {_failure_reason(outcome.error)}")
            raise outcome.error
        self.rubrics[task_id] = outcome.answer
        if self.path is not None:
            self.save(self.path)
        return outcome.answer

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write every rubric to ``path`` (default: the writer's own) atomically; returns the path."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("no path to save the rubrics to")
        target.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "format": RUBRICS_FORMAT,
            "model": self.config.model,
            "prompts": self.prompts.version,
            "rubrics": self.rubrics,
        }
        handle, temporary = tempfile.mkstemp(prefix=".rubrics-", suffix=".json", dir=target.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=2, ensure_ascii=False, sort_keys=True)
        os.replace(temporary, target)
        return target

    def load(self, path: str | os.PathLike[str]) -> None:
        """Add the rubrics stored at ``path`` (written by ``save``).

        Raises:
            BadInput: not a rubrics file, or a rubric without solution and behavior lists.
        """
        source = Path(path)
        try:
            body = json.loads(source.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInput(f"rubrics file {source}: cannot read: {exc}") from None
        if not isinstance(body, dict) or body.get("format") != RUBRICS_FORMAT:
            raise BadInput(f"rubrics file {source}: not a {RUBRICS_FORMAT} file")
        for task_id, rubric in (body.get("rubrics") or {}).items():
            try:
                reply = RubricReply.model_validate(rubric)
            except Exception:
                raise BadInput(
                    f"rubrics file {source}: task {task_id!r}: needs 'solution' and 'behavior' lists"
                ) from None
            self.rubrics[str(task_id)] = {"solution": list(reply.solution), "behavior": list(reply.behavior)}


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
