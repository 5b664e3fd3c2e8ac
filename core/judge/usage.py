"""``JudgeStats``: what the HTTP judge did, for reports and logs.

HTTP calls and their retries, tokens in and out and call latency (p50, p95), counted by the endpoint client
(``whileai.http.endpoint.EndpointStats``, which this extends); cache hits, the groups or passes the judge could not
grade by reason, the ``response_format`` in use, and the agreement between display orders (Kendall's tau) when
``permutations > 1``. Thread-safe counters: the judge's event loop and the caller's thread both write them. This module
keeps numbers; ``GroupwiseGrading.stats`` keeps the grading side (groups, fallbacks, spread)."""

from __future__ import annotations

import statistics
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from whileai.http.endpoint import EndpointStats

__all__ = ["SLOT_ORDERS_KEPT", "JudgeStats"]

# The graded orders the position figures rest on, the newest kept: enough to measure, bounded over a long run.
SLOT_ORDERS_KEPT = 4096


@dataclass
class JudgeStats(EndpointStats):
    """Counters of one judge (shared by its grader, scorer and rubric writer).

    Attributes:
        calls: HTTP requests sent, retries included.
        retries: requests that repeated an earlier one after a connection error, timeout, 429, 5xx or a 200 that was
            no chat completion (empty or cut body, no choices, empty message). A re-ask in a weaker
            ``response_format`` after a refusal is a call, not a retry.
        cache_hits: answers read from the on-disk cache instead of asked.
        tokens_in, tokens_out: prompt and completion tokens the server reported.
        latencies: seconds of each answered request.
        failures: groups (advantage mode), passes (reward mode) or rubrics the judge could not give, by reason.
        agreements: Kendall's tau between the display orders of each group asked in several orders.
        scores_read, scores_as_written: pass scores of the continuous forms, and how many of them were read as the
            judge wrote them (no probabilities came with them: a server that returns none, or ``answer_form:
            scores``) rather than from its token probabilities.
        slot_scores: for each group and display order graded, ``(display slot, score less the order's mean)`` of
            each pass (a ranking's score is its place, negated): a judge that reads content has slot means near 0;
            one that favours a place does not (``position``). The newest ``SLOT_ORDERS_KEPT`` orders are kept.
        structured_output: whether a ``response_format`` is still being sent.
        response_format: the form sent now: ``"json_schema"``, ``"json_object"`` or ``"none"`` (``auto`` steps down
            one form each time the server refuses one).
        concurrency: calls in flight at once (the config's, or the server's figure once asked); None before.

    Example:
        >>> stats = JudgeStats()
        >>> stats.count_cache_hit()
        >>> stats.count_failure("timeout")
        >>> stats.as_dict()["cache_hits"], dict(stats.failures)
        (1, {'timeout': 1})
    """

    # The structured-output form and the concurrency say where the client stands, not what it has done.
    STATE: ClassVar[frozenset[str]] = frozenset({"structured_output", "response_format", "concurrency"})

    cache_hits: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    agreements: list[float] = field(default_factory=list)
    scores_read: int = 0
    scores_as_written: int = 0
    slot_scores: deque[tuple[tuple[int, float], ...]] = field(default_factory=lambda: deque(maxlen=SLOT_ORDERS_KEPT))
    structured_output: bool = True
    response_format: str = "json_schema"
    concurrency: int | None = None

    def count_cache_hit(self) -> None:
        with self._lock:
            self.cache_hits += 1

    def count_failure(self, reason: str) -> None:
        with self._lock:
            self.failures[reason] += 1

    def count_agreement(self, tau: float) -> None:
        with self._lock:
            self.agreements.append(tau)

    def count_scores(self, read: int, as_written: int) -> None:
        """``read`` pass scores of a continuous form, ``as_written`` of them without probabilities."""
        with self._lock:
            self.scores_read += read
            self.scores_as_written += as_written

    def count_slots(self, orders: Sequence[Sequence[tuple[int, float]]]) -> None:
        """Each order's ``(display slot, score less the order's mean)`` of its passes (orders of one pass say
        nothing about position and are left out)."""
        with self._lock:
            self.slot_scores.extend(tuple(order) for order in orders if len(order) > 1)

    def slot_means(self) -> dict[int, float]:
        """The mean score less its order's mean, by display slot (0 first)."""
        with self._lock:
            return _slot_means(self.slot_scores)

    def position(self) -> dict[str, Any] | None:
        """The position effect beside the differences between passes, in score points: ``effect``, the standard
        deviation of the slot means; ``differences``, the mean over graded orders of the standard deviation of the
        passes' scores once each slot's mean is taken out (what is left to tell passes apart); ``orders``, how many
        graded orders they rest on. None before two orders of two passes or more."""
        with self._lock:
            entries = list(self.slot_scores)
        if len(entries) < 2:
            return None
        means = _slot_means(entries)
        effect = statistics.pstdev(means.values()) if len(means) > 1 else 0.0
        residual = [statistics.pstdev([c - means[s] for s, c in order]) for order in entries]
        return {"effect": effect, "differences": statistics.fmean(residual), "orders": len(entries)}

    def as_dict(self) -> dict[str, Any]:
        """The counters as JSON-ready values (latencies as p50/p95, agreement as its mean); a run report keeps them
        under ``grader.judge``."""
        endpoint = super().as_dict()  # calls, retries, tokens, latency
        with self._lock:
            agreements = list(self.agreements)
            return {
                "calls": endpoint["calls"],
                "retries": endpoint["retries"],
                "cache_hits": self.cache_hits,
                **{k: v for k, v in endpoint.items() if k not in ("calls", "retries")},
                "failures": dict(self.failures),
                "agreement_tau": sum(agreements) / len(agreements) if agreements else None,
                "agreement_groups": len(agreements),
                "scores_read": self.scores_read,
                "scores_as_written": self.scores_as_written,
                "slot_means": {str(k): round(v, 4) for k, v in _slot_means(self.slot_scores).items()},
                "structured_output": self.structured_output,
                "response_format": self.response_format,
                "concurrency": self.concurrency,
            }

    def __str__(self) -> str:
        d = self.as_dict()
        p50, p95 = d["latency_p50_s"], d["latency_p95_s"]
        latency = f"latency p50 {p50:.3f}s p95 {p95:.3f}s" if p50 is not None else "no latency yet"
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        text = (
            f"judge: {d['calls']} calls ({d['retries']} retries), {d['cache_hits']} cache hits, "
            f"tokens {d['tokens_in']} in / {d['tokens_out']} out, {latency}; failures: {failures}"
        )
        if d["agreement_tau"] is not None:
            text += f"; order agreement tau {d['agreement_tau']:.3f} over {d['agreement_groups']} groups"
        if d["scores_read"]:
            from_probabilities = d["scores_read"] - d["scores_as_written"]
            text += f"; scores from probabilities {from_probabilities} of {d['scores_read']}"
        if d["slot_means"]:
            shown = ", ".join(f"{int(k) + 1}: {v:+.2f}" for k, v in d["slot_means"].items())
            text += f"; mean score by display slot, less its order's mean: {shown}"
        return text


def _slot_means(entries: Sequence[Sequence[tuple[int, float]]]) -> dict[int, float]:
    totals: Counter[int] = Counter()
    counts: Counter[int] = Counter()
    for order in entries:
        for slot, centred in order:
            totals[slot] += centred
            counts[slot] += 1
    return {k: totals[k] / n for k, n in sorted(counts.items())}
