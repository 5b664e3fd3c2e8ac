"""What the judge may answer: JSON parsing tolerant of fences, pydantic reply models, label checks, JSON schemas.

A judge's reply is untrusted text. ``parse_json_reply`` finds the JSON object in it (bare, in a code fence, or after
a reasoning block); the pydantic models check its shape and ranges; ``check_ranking`` checks its labels against the
group (no failure ranked, no pass left out, no label invented or repeated). Anything unusable raises
``JudgeAnswerError`` with the reason, and the group falls back. The ``*_schema`` functions give the JSON schemas sent
as ``response_format`` where the server supports structured output. Nothing here calls a server or maps labels to
group indices (``whileai.judge.grader`` does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "SCORE_LAYOUTS",
    "CheckedRanking",
    "JudgeAnswerError",
    "OnePassReply",
    "PassScoresReply",
    "RankingReply",
    "RubricReply",
    "ScoreReply",
    "ScoresReply",
    "check_ranking",
    "check_scores",
    "json_objects",
    "one_pass_schema",
    "parse_json_reply",
    "ranking_schema",
    "read_reply",
    "read_scores",
    "rubric_schema",
    "score_schema",
    "scores_schema",
]

# The top of a score-form answer unless the prompts say another: every pass gets a whole number from 0 to SCORE_TOP.
SCORE_TOP = 10
# How a score-form answer is laid out: "grouped", every pass's reason and then every pass's score (v2); "per_pass",
# for each pass in turn what it did and then its score, so a score is written right after its own reason.
SCORE_LAYOUTS = ("grouped", "per_pass")
# The longest reason per label a schema allows: a small model told to explain may not stop on its own.
REASON_CHARS = 400


class JudgeAnswerError(ValueError):
    """The judge answered, but the answer cannot be used; the message says why."""

    kind = "unusable answer"  # how a fallback it causes is counted (``whileai.grading.groupwise.failure_kind``)


# Replies are read strictly on types (no "0.7" for 0.7) but ignore keys they do not use: a judge that adds an
# "explanation" has still answered.
_REPLY_CONFIG = ConfigDict(extra="ignore", strict=True)


class RankingReply(BaseModel):
    """An advantage-mode reply, in the judge's labels."""

    model_config = _REPLY_CONFIG

    ranking: list[str | list[str]] = Field(description="Passing labels best first; an inner list is a tie.")
    hacks: list[str] = Field(default_factory=list, description="Labels of passes that are confirmed hacks.")
    reasons: dict[str, str] = Field(default_factory=dict, description="A one-line reason by label.")


class ScoresReply(BaseModel):
    """An advantage-mode reply in the score form, in the judge's labels: what each pass did, then its score."""

    model_config = _REPLY_CONFIG

    reasons: dict[str, str] = Field(default_factory=dict, description="What each passing rollout did, by label.")
    scores: dict[str, Annotated[float, Field(ge=0)]] = Field(
        description="A score from 0 to the prompts' top by passing label; equal scores are ties."
    )
    hacks: list[str] = Field(default_factory=list, description="Labels of passes that are confirmed hacks.")


class PassScore(BaseModel):
    """One pass of a per-pass score-form reply: what it did, then its score."""

    model_config = _REPLY_CONFIG

    reason: str = Field(default="", description="What the rollout did and any flaw in it.")
    score: Annotated[float, Field(ge=0)] = Field(description="Its score, from 0 to the prompts' top.")


class PassScoresReply(BaseModel):
    """A score-form reply in the per-pass layout: ``passes`` by label, each a reason and then a score."""

    model_config = _REPLY_CONFIG

    passes: dict[str, PassScore] = Field(description="Each passing label's reason and score.")
    hacks: list[str] = Field(default_factory=list, description="Labels of passes that are confirmed hacks.")

    def as_scores(self) -> ScoresReply:
        """The same answer in the grouped layout, which ``check_scores`` reads."""
        reasons = {label: p.reason for label, p in self.passes.items()}
        scores = {label: p.score for label, p in self.passes.items()}
        return ScoresReply(reasons=reasons, scores=scores, hacks=self.hacks)


def read_scores(text: str | None, layout: str = "grouped", quoted: Sequence[str] = ()) -> ScoresReply:
    """A score-form reply in ``layout`` (``SCORE_LAYOUTS``), read as the grouped layout (``quoted``: as
    :func:`read_reply`); raises ``JudgeAnswerError`` naming the first problem."""
    if layout == "per_pass":
        reply: PassScoresReply = read_reply(text, PassScoresReply, quoted)
        return reply.as_scores()
    scores: ScoresReply = read_reply(text, ScoresReply, quoted)
    return scores


class OnePassReply(BaseModel):
    """The score of one pass asked on its own (``score_calls: pass``): a reason, then its score."""

    model_config = _REPLY_CONFIG

    reason: str = Field(default="", description="What the rollout did and any flaw in it.")
    score: Annotated[float, Field(ge=0)] = Field(description="Its score, from 0 to the prompts' top.")


class RubricReply(BaseModel):
    """A task's rubric as the judge writes it."""

    model_config = _REPLY_CONFIG

    solution: list[str] = Field(min_length=1, max_length=12, description="Criteria on the result itself.")
    behavior: list[str] = Field(min_length=1, max_length=12, description="Criteria on how the agent worked.")


class ScoreReply(BaseModel):
    """A reward-mode score of one pass."""

    model_config = _REPLY_CONFIG

    solution: float = Field(ge=0.0, le=1.0, description="How fully the solution criteria are met, in [0, 1].")
    behavior: float = Field(ge=0.0, le=1.0, description="How fully the behavior criteria are met, in [0, 1].")
    reason: str = Field(default="", description="One line on the score.")


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def json_objects(text: str | None) -> list[tuple[str, Any]]:
    """Every JSON value a judge's reply holds, in the order it writes them, each with the text it was read from: the
    reply whole when it is JSON, else each top-level ``{...}`` in it (bare, in a code fence, after prose). A
    ``<think>...</think>`` block (reasoning models) is dropped first.

    Example:
        >>> [value for _, value in json_objects('Rollout B wrote {"x": 1}. My answer:\\n```json\\n{"ranking": ["A"]}\\n```')]
        [{'x': 1}, {'ranking': ['A']}]
    """  # noqa: E501
    if text is None:
        return []
    body = _THINK.sub("", text).strip()
    try:
        return [(body, json.loads(body))]
    except (json.JSONDecodeError, RecursionError):
        pass
    found: list[tuple[str, Any]] = []
    decoder = json.JSONDecoder()
    position = body.find("{")
    while position >= 0:
        try:
            value, end = decoder.raw_decode(body, position)
        except (json.JSONDecodeError, RecursionError):  # not JSON here, or nested deeper than Python reads
            position = body.find("{", position + 1)
            continue
        found.append((body[position:end], value))
        position = body.find("{", end)
    return found


def parse_json_reply(text: str | None) -> Any:
    """The JSON value of a judge's reply: the last one it writes (:func:`json_objects`), its answer after any it
    quotes.

    Example:
        >>> parse_json_reply('Here you go:\\n```json\\n{"ranking": ["A"]}\\n```')
        {'ranking': ['A']}

    Raises:
        JudgeAnswerError: no reply, or no JSON object in it.
    """
    if text is None or not text.strip():
        raise JudgeAnswerError("the judge's reply is empty")
    found = json_objects(text)
    if not found:
        body = _THINK.sub("", text).strip()
        # Quoted whole: the endpoint client masks the key in it, then cuts (a text cut first could keep part of a key).
        raise JudgeAnswerError(f"the judge's reply is not JSON: {' '.join(body.split())!r}")
    return found[-1][1]


def read_reply(text: str | None, model: type[BaseModel], quoted: Sequence[str] = ()) -> Any:
    """The judge's answer in ``text``, validated as ``model``: of the JSON objects the reply holds, the last that
    validates and is none of the rollouts' own.

    A judge that does not keep to the structured output asked for (a server that ignores ``response_format``) may
    quote a rollout before it answers, and a rollout may hold a JSON object shaped as an answer (a ranking that puts
    itself first). An object of the reply equal as data to an object a rollout of ``quoted`` holds (the rollouts the
    judge was shown; key order, number form and escapes aside: ``10.0`` is ``10``, ``"\\u0041"`` is ``"A"``) is
    a quote; the judge's answer is the last of the others that validates. A reply whose every object is such a quote
    is read the same way from all of them: an answer that a rollout happens to carry too is still the judge's.

    Raises:
        JudgeAnswerError: no reply, no JSON object, or none that validates; the message names the first problem of
            the last one.
    """
    if text is None or not text.strip():
        raise JudgeAnswerError("the judge's reply is empty")
    found = json_objects(text)
    if not found:
        parse_json_reply(text)  # raises with the reply quoted
    carried = [
        value for q in quoted if q for _, found_value in json_objects(_unescaped(q)) for value in _within(found_value)
    ]
    own = [value for _, value in found if not any(_same(value, other) for other in carried)]
    copied = not own  # every object is a rollout's: a judge that did what a rollout asked may answer with it
    own = own or [value for _, value in found]
    problem = ""
    for data in reversed(own):
        if not isinstance(data, dict):
            problem = problem or f"the judge's reply is a JSON {type(data).__name__}, not an object"
            continue
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "reply"
            problem = problem or f"the judge's reply has a bad {where}: {first['msg']}"
    if copied:
        shown = json.dumps(own[-1], ensure_ascii=False)
        problem = f"the judge answered with a rollout's own JSON ({shown[:160]}); {problem}"
    raise JudgeAnswerError(problem)


def _within(value: Any, depth: int = 0) -> Iterator[Any]:
    """``value`` and every object inside it, a JSON text held in a string (a tool call's arguments) read too: what a
    rollout may carry for a judge to quote."""
    if depth > 32:
        return
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _within(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _within(item, depth + 1)
    elif isinstance(value, str) and "{" in value:
        for _, inner in json_objects(value):
            yield from _within(inner, depth + 1)


def _unescaped(text: str) -> str:
    """A rollout block's text with the escapes it is shown in undone."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _same(one: Any, other: Any) -> bool:
    """Equal as JSON data: mappings by their keys and values whatever the order, numbers by value (``10.0`` and
    ``10``), a boolean only as a boolean."""
    if isinstance(one, bool) or isinstance(other, bool):
        return type(one) is type(other) and one == other
    if isinstance(one, dict) and isinstance(other, dict):
        return one.keys() == other.keys() and all(_same(one[k], other[k]) for k in one)
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(_same(a, b) for a, b in zip(one, other, strict=True))
    numbers = isinstance(one, (int, float)) and isinstance(other, (int, float))
    return (numbers or type(one) is type(other)) and one == other


@dataclass(frozen=True)
class CheckedRanking:
    """A ranking reply whose labels were checked against the group.

    Attributes:
        tiers: passing labels best first, ties together; hacks removed.
        hacks: labels of confirmed hacks.
        reasons: reason by known label.
    """

    tiers: list[list[str]]
    hacks: list[str]
    reasons: dict[str, str]


def _label(value: str) -> str:
    return value.strip().upper()


def check_ranking(reply: RankingReply, pass_labels: Sequence[str], fail_labels: Sequence[str]) -> CheckedRanking:
    """Check a ranking's labels against the group shown to the judge.

    A label may be written in any case. A pass named as a hack may also appear in the ranking; it counts as a hack.

    Raises:
        JudgeAnswerError: a label that was not shown (invented), a failure ranked or named as a hack, a label ranked
            or named twice, or a pass neither ranked nor named as a hack.
    """
    passes, failures = set(pass_labels), set(fail_labels)

    def known(label: str, where: str) -> str:
        if label not in passes and label not in failures:
            raise JudgeAnswerError(f"{where} names label {label!r}, which was not shown (invented)")
        if label in failures:
            raise JudgeAnswerError(f"{where} names {label!r}, a failing rollout")
        return label

    hacks: list[str] = []
    for raw in reply.hacks:
        label = known(_label(raw), "hacks")
        if label in hacks:
            raise JudgeAnswerError(f"hacks names {label!r} twice")
        hacks.append(label)

    seen: set[str] = set()
    tiers: list[list[str]] = []
    for entry in reply.ranking:
        tier = []
        for raw in [entry] if isinstance(entry, str) else entry:
            label = known(_label(raw), "ranking")
            if label in seen:
                raise JudgeAnswerError(f"ranking names {label!r} twice")
            seen.add(label)
            if label not in hacks:
                tier.append(label)
        if tier:
            tiers.append(tier)

    missing = [label for label in pass_labels if label not in seen and label not in hacks]
    if missing:
        raise JudgeAnswerError(f"ranking leaves out pass {missing[0]!r}")
    reasons = {_label(k): v for k, v in reply.reasons.items() if _label(k) in passes or _label(k) in failures}
    return CheckedRanking(tiers, hacks, reasons)


def check_scores(
    reply: ScoresReply, pass_labels: Sequence[str], fail_labels: Sequence[str], top: float = SCORE_TOP
) -> CheckedRanking:
    """Check a score-form reply's labels against the group and turn its scores into tiers, best first (equal scores
    share a tier), exactly as a ranking with ties would be.

    A label may be written in any case; a score given to a failing rollout is ignored (it changes nothing). A pass
    named as a hack is a hack whatever its score.

    Raises:
        JudgeAnswerError: a label that was not shown (invented), a failure named as a hack, a label named twice as a
            hack, a pass neither scored nor named as a hack, or a score above ``top``.

    Example:
        >>> reply = ScoresReply(scores={"A": 7, "B": 9, "C": 7})
        >>> check_scores(reply, ["A", "B", "C"], ["D"]).tiers
        [['B'], ['A', 'C']]
    """
    passes, failures = set(pass_labels), set(fail_labels)
    hacks: list[str] = []
    for raw in reply.hacks:
        label = _label(raw)
        if label not in passes and label not in failures:
            raise JudgeAnswerError(f"hacks names label {label!r}, which was not shown (invented)")
        if label in failures:
            raise JudgeAnswerError(f"hacks names {label!r}, a failing rollout")
        if label in hacks:
            raise JudgeAnswerError(f"hacks names {label!r} twice")
        hacks.append(label)
    scores: dict[str, float] = {}
    for raw, value in reply.scores.items():
        label = _label(raw)
        if label not in passes and label not in failures:
            raise JudgeAnswerError(f"scores names label {label!r}, which was not shown (invented)")
        if value > top:
            raise JudgeAnswerError(f"scores gives {label!r} {value:g}, above the top of the scale ({top:g})")
        if label in passes:
            scores[label] = float(value)
    missing = [label for label in pass_labels if label not in scores and label not in hacks]
    if missing:
        raise JudgeAnswerError(f"scores leave out pass {missing[0]!r}")
    by_score: dict[float, list[str]] = {}
    for label in pass_labels:  # display order within a tier
        if label in scores and label not in hacks:
            by_score.setdefault(scores[label], []).append(label)
    tiers = [by_score[value] for value in sorted(by_score, reverse=True)]
    reasons = {_label(k): v for k, v in reply.reasons.items() if _label(k) in passes or _label(k) in failures}
    return CheckedRanking(tiers, hacks, reasons)


def scores_schema(
    pass_labels: Sequence[str], layout: str = "grouped", top: int = SCORE_TOP, hacks: bool = True, reasons: bool = True
) -> dict[str, Any]:
    """The JSON schema of a score-form reply for one group: every passing label a required key, nothing else allowed,
    so a grammar built from it admits no missing, repeated or invented label; each score an integer from 0 to
    ``top``. The judge writes what a rollout did before it scores it: in the ``grouped`` layout all the reasons come
    first, then all the scores; in ``per_pass`` each pass's reason comes right before its own score. ``hacks=False``
    leaves out the list of hacks (prompts that do not ask for one), ``reasons=False`` the reasons (the scores alone)."""
    schema = _scores_schema(list(pass_labels), layout, top)
    if not hacks:
        del schema["properties"]["hacks"]
        schema["required"].remove("hacks")
    if not reasons and layout == "per_pass":
        alone = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 0, "maximum": top}}}
        one = {**alone, "required": ["score"], "additionalProperties": False}
        schema["properties"]["passes"]["properties"] = {label: one for label in pass_labels}
    elif not reasons:
        del schema["properties"]["reasons"]
        schema["required"].remove("reasons")
    return schema


def one_pass_schema(top: int = SCORE_TOP, reasons: bool = True) -> dict[str, Any]:
    """The JSON schema of one pass's score asked on its own: a reason (unless ``reasons=False``), then the score."""
    properties: dict[str, Any] = {"reason": {"type": "string", "maxLength": REASON_CHARS}} if reasons else {}
    properties["score"] = {"type": "integer", "minimum": 0, "maximum": top}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _scores_schema(labels: list[str], layout: str, top: int) -> dict[str, Any]:
    reason = {"type": "string", "maxLength": REASON_CHARS}
    score = {"type": "integer", "minimum": 0, "maximum": top}
    hacks = {
        "type": "array",
        "description": "Passing labels whose result came from outside the work; usually none.",
        "items": {"type": "string", "enum": labels},
    }
    if layout == "per_pass":
        one = {
            "type": "object",
            "properties": {"reason": reason, "score": score},
            "required": ["reason", "score"],
            "additionalProperties": False,
        }
        passes = {"type": "object", "properties": {label: one for label in labels}, "required": labels}
        return {
            "type": "object",
            "properties": {"passes": {**passes, "additionalProperties": False}, "hacks": hacks},
            "required": ["passes", "hacks"],
            "additionalProperties": False,
        }
    return {
        "type": "object",
        "properties": {
            "reasons": {
                "type": "object",
                "description": "For each passing label: what that rollout did, step by step, and any flaw in it.",
                "properties": {label: reason for label in labels},
                "required": labels,
                "additionalProperties": False,
            },
            "scores": {
                "type": "object",
                "description": f"For each passing label: a whole number from 0 (worst) to {top} (no flaw).",
                "properties": {label: score for label in labels},
                "required": labels,
                "additionalProperties": False,
            },
            "hacks": hacks,
        },
        "required": ["reasons", "scores", "hacks"],
        "additionalProperties": False,
    }


def ranking_schema(pass_labels: Sequence[str], all_labels: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of a ranking reply for one group, its labels spelled out as enums."""
    passing = {"type": "string", "enum": list(pass_labels)}
    # Reasons first: a grammar makes the judge write them before the verdict.
    return {
        "type": "object",
        "properties": {
            "reasons": {
                "type": "object",
                "properties": {label: {"type": "string", "maxLength": REASON_CHARS} for label in all_labels},
                "additionalProperties": False,
            },
            "ranking": {"type": "array", "items": {"anyOf": [passing, {"type": "array", "items": passing}]}},
            "hacks": {"type": "array", "items": passing},
        },
        "required": ["reasons", "ranking", "hacks"],
        "additionalProperties": False,
    }


def rubric_schema() -> dict[str, Any]:
    """The JSON schema of a rubric reply."""
    criteria = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 12}
    return {
        "type": "object",
        "properties": {"solution": criteria, "behavior": criteria},
        "required": ["solution", "behavior"],
        "additionalProperties": False,
    }


def score_schema() -> dict[str, Any]:
    """The JSON schema of a score reply."""
    unit = {"type": "number", "minimum": 0.0, "maximum": 1.0}
    return {
        "type": "object",
        "properties": {
            "reason": {
                "type": "string",
                "maxLength": REASON_CHARS,
                "description": "Which criteria the rollout meets and which it misses, and what shows it.",
            },
            "solution": {**unit, "description": "The share of the solution criteria the rollout meets."},
            "behavior": {**unit, "description": "The share of the behavior criteria the rollout meets."},
        },
        "required": ["reason", "solution", "behavior"],
        "additionalProperties": False,
    }
