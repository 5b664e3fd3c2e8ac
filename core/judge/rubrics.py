"""The judge in reward mode (GRS): ``JudgeScorer`` scores each pass against its task's rubric, solution and behavior
in [0, 1]; ``JudgeRubricWriter`` writes a task's rubric from its first group, keeps one per task and stores them as
JSON. ``whileai.judge.grader.build_judge`` wires both on one client."""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, GraderUnavailable
from whileai.judge.base import JudgeBase, failure_reason
from whileai.judge.cache import cache_key
from whileai.judge.client import CallSpec, JudgeClient
from whileai.judge.orders import display_orders
from whileai.judge.prompts import RolloutView, group_messages, rollout_labels, score_messages
from whileai.judge.replies import RubricReply, ScoreReply, read_reply, rubric_schema, score_schema
from whileai.judge.settings import JudgeConfig

__all__ = ["RUBRICS_FORMAT", "JudgeRubricWriter", "JudgeScorer"]

RUBRICS_FORMAT = "whileai-judge-rubrics/1"

# The JSON schemas sent as response_format, built once and never changed (a request body only reads them).
_SCORE_SCHEMA = score_schema()
_RUBRIC_SCHEMA = rubric_schema()


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


class JudgeScorer(JudgeBase):
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
                self.stats.count_failure(failure_reason(outcome.error))
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


class JudgeRubricWriter(JudgeBase):
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
        messages = group_messages(self.prompts, "rubric", task, views, self.config.max_rollout_chars)
        read = functools.partial(_read_rubric, quoted=[view.text for view in views])
        spec = CallSpec("rubric", messages, _RUBRIC_SCHEMA, read, self._key("rubric", messages, _RUBRIC_SCHEMA))
        try:
            outcome = self.client.run([spec])[0]
        except GraderUnavailable:
            self.stats.count_failure("unreachable")
            raise
        if outcome.error is not None:
            self.stats.count_failure(f"rubric {failure_reason(outcome.error)}")
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
