"""Continuous pass scores: the readers of the score forms that keep a number per pass, and a group's answer made
from several display orders of them.

Two ways of asking give a number per pass rather than a ranking: ``answer_form: probabilities`` (a score's expected
value under the judge's token probabilities, ``whileai.judge.probabilities``) and ``score_calls: pass`` (one call a
pass, the whole group shown first). ``GroupScoresReader`` reads a call that scores every pass of a group,
``OnePassReader`` a call that scores one; both read the score as written where no probabilities came with it (a
server that returns none, or ``answer_form: scores``) and say so.

``assemble_scores`` joins a group's orders: a pass's score is its mean over the orders; the group's order noise is
how far a pass's score moves between orders (the mean absolute difference between two orders' scores of a pass);
passes whose means differ by no more than that noise share a tier (a tier holds the best pass not yet placed and
every pass within the band below it), so a difference the judge's own reordering could make is no difference.
With one order there is no noise to measure, and the band is ``tie_within`` of the scale's top. The scores by display
slot, centred on each order's mean, are returned for the position measure (``JudgeStats.count_slots``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from whileai.judge.orders import mean_kendall_tau
from whileai.judge.probabilities import Token, number_offsets, score_at, token_text
from whileai.judge.prompts import AnswerShape
from whileai.judge.replies import JudgeAnswerError, OnePassReply, check_scores, read_reply, read_scores

__all__ = ["GroupScoresReader", "OnePassReader", "assemble_scores", "banded_tiers", "order_noise", "slot_scores"]


def _objects_with(text: str, key: str) -> list[int]:
    """Where each top-level JSON object of ``text`` that has ``key`` starts."""
    starts, decoder, position = [], json.JSONDecoder(), text.find("{")
    while position >= 0:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict) and key in value:
            starts.append(position)
        position = text.find("{", end)
    return starts


def _read_at(tokens: list[Token] | None, key: str, paths: Mapping[str, tuple[str, ...]], top: int) -> dict:
    """Each name's score read where its path (keys compared as labels are: stripped, upper case) is in the reply's
    last object with ``key``, from the tokens' probabilities: ``{name: (mean, sd, sampled, written)}``; a name whose
    place is not found is left out."""
    if not tokens:
        return {}
    text = token_text(tokens)
    starts = _objects_with(text, key)
    if not starts:
        return {}
    try:
        offsets = {tuple(k.strip().upper() for k in path): at for path, at in number_offsets(text, starts[-1]).items()}
    except ValueError:
        return {}
    read = {}
    for name, path in paths.items():
        offset = offsets.get(tuple(k.upper() for k in path))
        if offset is None:
            continue
        try:
            reading = score_at(tokens, offset, top)
        except ValueError:
            continue
        read[name] = (reading.mean, reading.sd, reading.sampled, reading.written)
    return read


def _reading(read: tuple[float, float, bool, int] | None, written: float) -> tuple[float, float, bool]:
    """A pass's (score, spread, read as written): from the tokens where they were read at a digit that spells the
    score the answer holds (the same object: a judge may quote one before it answers), else as written."""
    if read is None or read[3] != written:
        return written, 0.0, True
    return read[0], read[1], read[2]


class GroupScoresReader:
    """``CallSpec.read`` of a call that scores every pass of one display order: each pass's score (from the
    probabilities where they came, else as written), its spread, the passes read as written, hacks and reasons."""

    def __init__(self, pass_labels: list[str], fail_labels: list[str], shape: AnswerShape, quoted: Sequence[str]):
        self.pass_labels, self.fail_labels, self.shape, self.quoted = pass_labels, fail_labels, shape, quoted

    def __call__(self, text: str | None, tokens: list[Token] | None = None) -> dict[str, Any]:
        reply = read_scores(text, self.shape.layout, self.quoted)
        if not self.shape.hacks:
            reply.hacks = []
        checked = check_scores(reply, self.pass_labels, self.fail_labels, self.shape.top)
        written = {label.strip().upper(): value for label, value in reply.scores.items()}
        if self.shape.layout == "per_pass":
            key, paths = "passes", {x: ("passes", x, "score") for x in self.pass_labels}
        else:
            key, paths = "scores", {x: ("scores", x) for x in self.pass_labels}
        read = _read_at(tokens, key, paths, self.shape.top)
        scores, spread, sampled = {}, {}, []
        for label in self.pass_labels:
            if label in checked.hacks:
                continue
            mean, sd, as_written = _reading(read.get(label), float(written.get(label, 0.0)))
            scores[label], spread[label] = mean, sd
            if as_written:
                sampled.append(label)
        return {"scores": scores, "sd": spread, "sampled": sampled, "hacks": checked.hacks, "reasons": checked.reasons}


class OnePassReader:
    """``CallSpec.read`` of a call that scores one pass (``score_calls: pass``)."""

    def __init__(self, label: str, top: int, quoted: Sequence[str]) -> None:
        self.label, self.top, self.quoted = label, top, quoted

    def __call__(self, text: str | None, tokens: list[Token] | None = None) -> dict[str, Any]:
        reply: OnePassReply = read_reply(text, OnePassReply, self.quoted)
        if reply.score > self.top:
            raise JudgeAnswerError(f"score {reply.score:g} is above the top of the scale ({self.top})")
        read = _read_at(tokens, "score", {"it": ("score",)}, self.top)
        mean, sd, as_written = _reading(read.get("it"), float(reply.score))
        return {
            "scores": {self.label: mean},
            "sd": {self.label: sd},
            "sampled": [self.label] if as_written else [],
            "hacks": [],
            "reasons": {self.label: reply.reason} if reply.reason else {},
        }


def slot_scores(order: Sequence[int], scores: Mapping[int, float]) -> list[tuple[int, float]]:
    """``(display slot, score less the order's mean)`` of each scored pass of one display order.

    Example:
        >>> slot_scores([2, 0, 1], {0: 8.0, 2: 9.0})
        [(0, 0.5), (1, -0.5)]
    """
    if not scores:
        return []
    centre = sum(scores.values()) / len(scores)
    return [(slot, scores[index] - centre) for slot, index in enumerate(order) if index in scores]


def banded_tiers(scores: Mapping[int, float], band: float) -> list[list[int]]:
    """Best-first tiers of ``scores``: each tier holds the best pass not yet placed and every pass within ``band``
    below it (equal scores always tie).

    Example:
        >>> banded_tiers({0: 8.9, 1: 8.7, 2: 8.2, 3: 8.85}, band=0.25)
        [[0, 3, 1], [2]]
    """
    tiers: list[list[int]] = []
    for index in sorted(scores, key=lambda i: -scores[i]):
        if tiers and scores[tiers[-1][0]] - scores[index] <= max(band, 1e-9):
            tiers[-1].append(index)
        else:
            tiers.append([index])
    return tiers


def order_noise(per_order: Sequence[Mapping[int, float]], passes: Sequence[int]) -> float | None:
    """The mean absolute difference between two orders' scores of a pass, over passes and pairs of orders; None with
    fewer than two orders."""
    diffs = [abs(a[i] - b[i]) for a, b in itertools.combinations(per_order, 2) for i in passes if i in a and i in b]
    return sum(diffs) / len(diffs) if diffs else None


def assemble_scores(
    passes: Sequence[int],
    orders: Sequence[Sequence[int]],
    labels: Sequence[Mapping[str, int]],
    answers: Sequence[dict],
    min_band: float = 0.0,
) -> tuple[dict[str, Any], list[list[tuple[int, float]]]]:
    """A group's answer from its display orders' score answers (one per order, labels already joined).

    Args:
        passes: the group's passing indices.
        orders: each order's group indices in display order.
        labels: each order's label to group index.
        answers: each order's ``{"scores", "sd", "sampled", "hacks", "reasons"}`` by label.
        min_band: the smallest difference that separates two passes (``tie_within`` of the scale's top).

    Returns:
        The answer (``ranking`` in banded tiers, ``hacks`` named in more than half of the orders, ``reasons`` of the
        first order, ``notes`` with the orders, their agreement, each pass's mean score, its scores in each order
        and its spread, the order noise and the count of scores read as written) and each order's
        :func:`slot_scores`.
    """
    per_order = [{labels[k][x]: v for x, v in a["scores"].items()} for k, a in enumerate(answers)]
    spreads = [{labels[k][x]: v for x, v in a["sd"].items()} for k, a in enumerate(answers)]
    flagged = [{labels[k][x] for x in a["hacks"]} for k, a in enumerate(answers)]
    hacks = [i for i in passes if 2 * sum(i in f for f in flagged) > len(answers)]
    kept = [i for i in passes if i not in hacks]
    means = {i: sum(o[i] for o in per_order if i in o) / max(1, sum(i in o for o in per_order)) for i in kept}
    means = {i: v for i, v in means.items() if any(i in o for o in per_order)}
    missing = [i for i in kept if i not in means]
    noise = order_noise(per_order, kept)
    tiers = banded_tiers(means, max(noise or 0.0, min_band))
    if missing:  # named a hack by some orders but not most: ranked last
        tiers.append(missing)
    agreement = None
    if len(answers) > 1:
        rankings = [
            [*banded_tiers({i: o[i] for i in kept if i in o}, 0.0), sorted(f)]
            for o, f in zip(per_order, flagged, strict=True)
        ]
        agreement = mean_kendall_tau(rankings, list(passes))
    slots = [slot_scores(order, scores) for order, scores in zip(orders, per_order, strict=True)]
    sd = {i: sum(s[i] for s in spreads if i in s) / max(1, sum(i in s for s in spreads)) for i in means}
    first = labels[0]
    notes = {
        "orders": [list(o) for o in orders],
        "agreement": agreement,
        "scores": {str(i): round(v, 4) for i, v in means.items()},
        "order_scores": [{str(i): round(v, 4) for i, v in o.items()} for o in per_order],
        "score_sd": {str(i): round(v, 4) for i, v in sd.items()},
        "order_noise": None if noise is None else round(noise, 4),
        "as_written": sum(len(a["sampled"]) for a in answers),
        "read": sum(len(a["scores"]) for a in answers),
    }
    if any(math.isnan(v) for v in means.values()):
        raise JudgeAnswerError("a score is not a number")
    reasons = {str(first[x]): r for x, r in answers[0]["reasons"].items() if x in first}
    return {"ranking": tiers, "hacks": hacks, "reasons": reasons, "notes": notes}, slots
