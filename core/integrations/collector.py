"""Whole groups out of responses that arrive one at a time: groupwise grading for a trainer that rewards each
response on its own.

verl's reward loop (0.9) hands a reward manager one response per call, while the rollouts are still running, and
waits for its score. Grading needs the whole group, so :class:`GroupCollector` holds each response until all
``group_size`` responses of its ``uid`` have arrived, grades the group once with the ``GroupwiseGrading`` object,
and answers every waiting call with its share: ``A'_i + mean(R)``, so the trainer's group-mean subtraction yields
equation 3.

What keeps a training step moving:

- Full groups queue for one grading thread, which takes every group queued since its last batch in one
  ``grade_batch`` call (a judge answers them concurrently), so the event loop that collects responses is never
  blocked by a grader.
- A group still short of ``group_size`` responses ``wait_s`` after its first one falls back: its responses get
  their verifier rewards as they are (plain GRPO on the responses that came), counted as ``group incomplete``.
- A response whose group was already answered gets its verifier reward: counted in ``late`` when its group had
  fallen back incomplete, in ``repeated`` when the group was answered whole (an extra response: a copy verl pads a
  batch with, or a uid used again in a later step), with the uid said.
- A grader that raises, times out or answers nonsense makes its group fall back (``GroupwiseGrading``); if the
  grading call itself fails, every group in it falls back, counted by the exception's type.
- A member the verifier could not score (None, NaN) gets the mean of its group's other values: the trainer has no
  NaN to carry, the group's mean is unchanged, and the member's advantage is 0, as TRL gives it.

No trainer is imported here; ``whileai.integrations.verl`` adapts verl's calls to this.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from whileai.defaults import GROUP_WAIT_S
from whileai.errors import Recurring
from whileai.grading.group import GradedGroup, describe, new_group, widen
from whileai.grading.groupwise import GroupwiseGrading
from whileai.rows.rewards import scorable_members

__all__ = ["GroupCollector", "Response", "Shaped", "trainer_values"]

# Groups answered, remembered so that a late response of one is not taken for the first of a new group.
_CLOSED_MEMORY = 1 << 16


@dataclass(frozen=True)
class Response:
    """One response as the collector holds it: its verifier reward R (NaN when unscorable), its prompt and
    completion (texts or messages, as the grader reads them) and its task (None: the prompt names it)."""

    reward: float
    prompt: Any
    completion: Any
    task_id: str | None = None
    answered: bool = False  # answered already, elsewhere (a groups actor lost with it): its group cannot be graded


@dataclass(frozen=True)
class Shaped:
    """A response's answer: ``value`` is what the trainer receives, ``member`` its place in its group's record
    (``grading.jsonl``: -1 for a late response, which has none); ``fallback`` is empty, or the kind of reason its
    group fell back (``"group incomplete"``, ``"http 429"``, ``"late response"``, ...)."""

    value: float
    group: str
    member: int = -1
    fallback: str = ""
    stop: str = ""  # why the spread watch asks the run to stop (``spread.watch.on_fail: stop``), or empty


@dataclass
class _Open:
    key: str
    responses: list[Response] = field(default_factory=list)
    waiters: list[asyncio.Future[Shaped]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


def trainer_values(values: list[float]) -> list[float]:
    """``values`` with each NaN (an unscorable member) replaced by the mean of the others (0 when none is finite),
    so that a trainer that cannot carry NaN sees the group's mean unchanged and gives the member advantage 0.

    Example:
        >>> trainer_values([1.5, float("nan"), 0.5])
        [1.5, 1.0, 0.5]
    """
    finite = [v for v in values if math.isfinite(v)]
    mean = sum(finite) / len(finite) if finite else 0.0
    return [v if math.isfinite(v) else mean for v in values]


class GroupCollector:
    """Collects responses into groups by key, grades each full group once, and answers each response.

    Args:
        grading: the ``GroupwiseGrading`` object (the recipe's grader and knobs).
        group_size: responses per group (verl's ``actor_rollout_ref.rollout.n``).
        wait_s: how long a group may wait for its last response, from its first.
        on_graded: called on the grading thread with each batch of answered groups (the ``grading.jsonl`` log);
            what it raises is reported through ``say`` and does not stop anything.
        watch: called on the grading thread after ``on_graded`` with the batch's groups, prompts and completions
            (the spread watch, which may grade control groups there); what it raises is said and stops nothing.
        say: where the collector's own warnings go (a log line).

    Example:
        >>> from whileai import GroupwiseGrading
        >>> grading = GroupwiseGrading(lambda group: {"ranking": [g["index"] for g in group if g["passed"]]})
        >>> collector = GroupCollector(grading, group_size=2)
        >>> async def both():
        ...     first = collector.reward("u1", Response(1.0, "p", "short"))
        ...     second = collector.reward("u1", Response(0.0, "p", "long"))
        ...     return [s.value for s in await asyncio.gather(first, second)]
        >>> asyncio.run(both())
        [1.0, 0.0]
        >>> collector.close()
    """

    def __init__(
        self,
        grading: GroupwiseGrading,
        group_size: int,
        *,
        wait_s: float = GROUP_WAIT_S,
        on_graded: Callable[[list[GradedGroup]], None] | None = None,
        say: Callable[[str], None] | None = None,
        watch: Callable[[list[GradedGroup], list[Any], list[Any]], None] | None = None,
    ) -> None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s > 0:
            raise ValueError(f"wait_s must be a number of seconds > 0, got {wait_s!r}")
        self.grading = grading
        self.group_size = group_size
        self.wait_s = float(wait_s)
        self.on_graded = on_graded
        self.watch = watch
        self.say = say or (lambda message: None)
        self.late = Recurring()
        self.repeated = Recurring()
        self._open: dict[str, _Open] = {}
        self._closed: OrderedDict[str, bool] = OrderedDict()  # answered groups: was each whole?
        self._queue: list[tuple[str, _Open]] = []
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whileai-grading")
        self._lock = threading.Lock()
        self._stopped = False

    # ------------------------------------------------------------------ the calls

    async def reward(self, key: str, response: Response) -> Shaped:
        """Hold ``response`` until its group ``key`` is full and graded, then its share of the group's reward."""
        loop = self._bind()
        if self._stopped:
            return Shaped(trainer_values([response.reward])[0], key, fallback="closed")
        if key in self._closed:
            return self._answered_already(key, response)
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = _Open(key)
            group.timer = loop.call_later(self.wait_s, self._expire, key)
        waiter: asyncio.Future[Shaped] = loop.create_future()
        group.responses.append(response)
        group.waiters.append(waiter)
        if len(group.responses) == self.group_size:
            if any(r.answered for r in group.responses):
                self._fall_back(key, "groups actor lost", "a response of the group was answered by a lost actor")
            else:
                self._close(key)
                self._queue.append((key, group))
                assert self._wake is not None
                self._wake.set()
        return await waiter

    def _answered_already(self, key: str, response: Response) -> Shaped:
        value = trainer_values([response.reward])[0]
        if not self._closed[key]:
            if self.late.add():
                self.say(
                    f"whileai: a response of group {key!r} came after its group fell back incomplete "
                    f"({self.late.count} so far): it gets its verifier reward as it is"
                )
            return Shaped(value, key, fallback="late response")
        if self.repeated.add():
            self.say(
                f"whileai: group {key!r} was answered whole and a response of that uid came again "
                f"({self.repeated.count} so far): it gets its verifier reward as it is. verl pads a validation batch "
                "with copies of its first rows (a few a validation); more means a uid used again in a later step (verl "
                "v0's validation keeps a dataset's own 'uid' column): drop that column, so that each step's groups are "
                "new"
            )
        return Shaped(value, key, fallback="repeated uid")

    @property
    def open_groups(self) -> int:
        """Groups waiting for responses."""
        return len(self._open)

    def figures(self) -> dict[str, Any]:
        """The grading object's figures, with the collector's own: late and repeated responses, groups still open."""
        return {
            **self.grading.figures(),
            "late_responses": self.late.count,
            "repeated_uid_responses": self.repeated.count,
            "open_groups": self.open_groups,
        }

    def close(self) -> None:
        """Stop the grading thread. Call it on the collector's event loop: every response still waiting gets its
        verifier reward (``"closed"``), and so does any that comes later."""
        self._stopped = True
        for group in [*self._open.values(), *(group for _, group in self._queue)]:
            if group.timer is not None:
                group.timer.cancel()
            self._release(group, "closed")
        self._open, self._queue = {}, []
        if self._worker is not None and not self._worker.done() and self._loop is not None:
            if self._loop.is_running():
                self._loop.call_soon_threadsafe(self._worker.cancel)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ inside

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, with the grading task started on it (again, if an earlier loop has gone: what that
        loop held open cannot be answered on this one)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._open, self._queue = loop, {}, []
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._grade_queued())
        return loop

    def _close(self, key: str) -> None:
        group = self._open.pop(key)
        if group.timer is not None:
            group.timer.cancel()
        self._closed[key] = len(group.responses) == self.group_size
        if len(self._closed) > _CLOSED_MEMORY:
            self._closed.popitem(last=False)

    def _expire(self, key: str) -> None:
        """A group still short of responses ``wait_s`` after its first: its responses get their verifier rewards."""
        group = self._open.get(key)
        if group is None:
            return
        self._fall_back(
            key,
            "group incomplete",
            f"group incomplete: {len(group.responses)} of {self.group_size} responses within {self.wait_s:g} s",
        )

    def _fall_back(self, key: str, kind: str, reason: str) -> None:
        """Group ``key``, open, closed ungraded: its responses get their verifier rewards, counted as ``kind``."""
        group = self._open[key]
        self._close(key)
        try:
            values = [r.reward for r in group.responses]
            record, _, _, members = new_group(
                self._task(group), values, None, [r.prompt for r in group.responses], [""] * len(values)
            )
            if members is not None:
                widen(record, members, values)
            record.label = key
            record.fail(kind, reason)
            self.grading.stats.record_groups([record], self.grading.hack_zero)
            if self.on_graded is not None and self._loop is not None and not self._stopped:
                self._loop.run_in_executor(self._executor, self._log, [record])
        finally:
            self._release(group, kind)

    def _task(self, group: _Open) -> str:
        first = group.responses[0]
        if first.task_id is not None:
            return first.task_id
        from whileai.rows.text import prompt_text

        return str(prompt_text(first.prompt))

    async def _grade_queued(self) -> None:
        """The grading task: every group queued since the last batch, in one call on the grading thread."""
        assert self._wake is not None and self._loop is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                try:
                    graded = await self._loop.run_in_executor(self._executor, self._grade, batch)
                except Exception as error:  # the grading call itself failed: every group in it falls back
                    graded = [self._fallback(key, group, error) for key, group in batch]
                for (_, group), record in zip(batch, graded, strict=True):
                    self._answer(group, record, (record.failure or "fallback") if record.reason else "")
            except BaseException as error:  # cancelled, or a record that cannot be read: never leave a call waiting
                for _, group in batch:
                    self._release(group, type(error).__name__)
                if isinstance(error, asyncio.CancelledError):
                    raise
                self.say(f"whileai: a batch of {len(batch)} group(s) kept its verifier rewards: {describe(error)}")

    def _grade(self, batch: list[tuple[str, _Open]]) -> list[GradedGroup]:
        """One ``grade_batch`` call over the batch's groups."""
        responses = [r for _, group in batch for r in group.responses]
        graded = self.grading.grade_batch(
            [r.reward for r in responses],
            [r.prompt for r in responses],
            [r.completion for r in responses],
            self.group_size,
            task_id=[r.task_id for r in responses],  # type: ignore[arg-type]  # None: the prompt names the task
        )
        for (key, _), record in zip(batch, graded, strict=True):
            record.label = key
        self._log(graded)
        if self.watch is not None:
            try:
                self.watch(graded, [r.prompt for r in responses], [r.completion for r in responses])
            except Exception as error:  # the watch watches; it never costs the groups their grading
                self.say(f"whileai: the spread watch could not read {len(graded)} group(s): {describe(error)}")
        return graded

    def _fallback(self, key: str, group: _Open, error: BaseException) -> GradedGroup:
        values = [r.reward for r in group.responses]
        record = GradedGroup(self._task(group), values, [v > 0 for v in values], values[:], values[:])
        scorable = scorable_members(values)
        record.unscorable = 0 if scorable is None else len(values) - len(scorable)
        record.label = key
        record.fail(type(error).__name__, f"grading raised: {describe(error)}", error)
        self.grading.stats.record_groups([record], self.grading.hack_zero)
        return record

    def _release(self, group: _Open, fallback: str) -> None:
        """Answer every response of ``group`` still waiting with its verifier reward (cannot fail)."""
        values = trainer_values([r.reward for r in group.responses])
        for member, (waiter, value) in enumerate(zip(group.waiters, values, strict=True)):
            if not waiter.done():
                waiter.set_result(Shaped(value, group.key, member, fallback))

    def _answer(self, group: _Open, record: GradedGroup, fallback: str) -> None:
        values = trainer_values(list(record.shaped))
        for member, (waiter, value) in enumerate(zip(group.waiters, values, strict=True)):
            if not waiter.done():  # else its caller gave up (cancelled)
                waiter.set_result(Shaped(value, record.label or "", member, fallback))

    def _log(self, graded: list[GradedGroup]) -> None:
        if self.on_graded is None:
            return
        try:
            with self._lock:
                self.on_graded(graded)
        except Exception as error:  # a full disk must not stop training
            self.say(f"whileai: could not log {len(graded)} graded group(s): {describe(error)}")
