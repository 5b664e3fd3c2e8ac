"""Calling a plain grader function: a time limit per call, and several calls at once when the grader allows it.

A grader is user code. One that hangs must not hang training: on a multi-process run the other processes wait for
rank 0 in a collective, so a stuck grader stops every GPU. ``GraderCalls`` runs each call in a worker process
(``whileai.isolation``) and waits at most ``timeout_s`` for it, whatever the call does (a pattern that keeps the GIL
included); a call that runs over becomes a ``GraderTimeout`` in place of its answer (the group falls back, counted),
and its worker is killed with everything it started. What the grader prints goes to stderr, its ``sys.exit`` is its
group's failure, and its answer comes back as plain data read within the limit.

A grader that declares itself thread-safe (``grader.thread_safe = True``) is called on up to ``concurrency`` groups at
once, each in a worker of its own; any other grader one group at a time. A worker killed for running over is
replaced for the next group, so one hung call costs its own group and no other.

What this module does not do: validate answers (``whileai.grading.answers``), or time a grader with a batch method
(the HTTP judge keeps its own per-call timeouts and batch deadline; the scripted rule stops its own expressions).
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from whileai.errors import BadInput, function_label
from whileai.isolation import CallTimeout, Worker, wait_for_any

__all__ = ["GraderCalls", "GraderTimeout", "check_grader_call", "each_or_error"]

# How GroupwiseGrading calls a plain grader function in each mode, and the batch method that replaces that call.
_GRADER_CALLS = {
    "advantage": ("grader(group)", 1, "grade_groups"),
    "reward": ("grader(item, rubric)", 2, "score_passes"),
}


def check_grader_call(grader: Callable[..., Any], mode: str) -> None:
    """Refuse a plain grader function that cannot be called as the mode calls it, before anything is graded (each
    call would raise, and every group fall back): ``grader(group)`` in advantage mode, ``grader(item, rubric)`` in
    reward mode. A grader with the mode's batch method (the judge, the scripted rule) is called through that.

    Raises:
        BadInput: naming the function (its name, file and line), how the mode calls it and why it cannot be.
    """
    call, arguments, batch = _GRADER_CALLS[mode]
    if callable(getattr(grader, batch, None)):
        return
    try:
        signature = inspect.signature(grader)
    except (TypeError, ValueError):  # a builtin or C callable without one: its first call will tell
        return
    try:
        signature.bind(*([None] * arguments))
    except TypeError as err:
        other = "reward" if mode == "advantage" else "advantage"
        try:
            signature.bind(*([None] * _GRADER_CALLS[other][1]))
            fix = (
                f"it takes {signature}: if it was written for {other} mode, which calls {_GRADER_CALLS[other][0]}, "
                f"set grading.mode: {other}"
            )
        except TypeError:
            fix = (
                f"it takes {signature}: give it the parameters of {call}, or of {_GRADER_CALLS[other][0]} with "
                f"grading.mode: {other}"
            )
        raise BadInput(
            f"grader {function_label(grader)}: {mode} mode calls it as {call}, and it cannot be ({err}); {fix}"
        ) from None


def each_or_error(call: Callable[[Any], Any], requests: Sequence[Any]) -> list[Any]:
    """``call(request)`` for each request in turn, on this thread; an exception stands in for a call that raised.

    Any exception, ``SystemExit`` from a grader that calls ``sys.exit`` included, is an answer: a grader's misdeed
    is its group's fallback, never the end of the run. Only Ctrl-C (``KeyboardInterrupt``) goes through.

    Example:
        >>> each_or_error(lambda x: 10 // x, [5, 0])
        [2, ZeroDivisionError('integer division or modulo by zero')]
    """
    answers: list[Any] = []
    for request in requests:
        try:
            answers.append(call(request))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            answers.append(exc)
    return answers


class GraderTimeout(CallTimeout):
    """A grader call that did not return within its time limit."""


class _Thread:
    """A worker thread's flag: a retired worker finishes the call it is stuck in, then exits."""

    __slots__ = ("retired",)

    def __init__(self) -> None:
        self.retired = False


class _Batch:
    """The calls of one ``run``: how many are still open, and the one event the caller waits on."""

    __slots__ = ("done", "open")

    def __init__(self, count: int) -> None:
        self.open = count
        self.done = threading.Event()


class _Call:
    """One pending call: the request, then its answer or exception (``closed``), or the ``GraderTimeout`` that stands
    in for it (``abandoned``)."""

    __slots__ = ("abandoned", "answer", "batch", "closed", "error", "request", "started", "worker")

    def __init__(self, request: Any, batch: _Batch) -> None:
        self.request = request
        self.batch = batch
        self.answer: Any = None
        self.error: BaseException | None = None
        self.started: float | None = None  # time.monotonic() when a worker began the call
        self.worker: _Thread | None = None
        self.closed = False
        self.abandoned = False


class _InProcess:
    """``GraderCalls`` for a grader that runs in the calling process (``in_process = True``): each call on a worker
    thread, waited for at most ``timeout_s``. The limit holds only while the call lets other threads run (not
    through a pattern or a C call that keeps the GIL), and a call that ran over is abandoned, not stopped. The calls
    of a batch run back to back; the caller sleeps until the whole batch is answered or the earliest running call
    reaches its limit."""

    def __init__(self, timeout_s: float | None, concurrency: int) -> None:  # checked by GraderCalls
        self.timeout_s = timeout_s
        self.concurrency = int(concurrency)
        self.timeouts = 0
        self._tasks: queue.SimpleQueue[tuple[Callable[[Any], Any], _Call] | None] = queue.SimpleQueue()
        self._workers = 0
        self._lock = threading.Lock()

    def _work(self, me: _Thread) -> None:
        lock, clock = self._lock, time.monotonic
        while not me.retired:
            item = self._tasks.get()
            if item is None:
                return
            call, pending = item
            with lock:
                if pending.abandoned:  # given up before it started
                    continue
                pending.worker = me
                pending.started = clock()
            answer, error = None, None
            try:
                answer = call(pending.request)
            except BaseException as exc:  # handed to the caller as the answer
                error = exc
            with lock:
                if pending.abandoned:  # ran over: its GraderTimeout was handed out already
                    continue
                pending.answer, pending.error, pending.closed = answer, error, True
                batch = pending.batch
                batch.open -= 1
                if not batch.open:
                    batch.done.set()

    def _ensure_workers(self, count: int) -> None:
        with self._lock:
            while self._workers < count:
                worker = _Thread()
                threading.Thread(target=self._work, args=(worker,), name="whileai-grader", daemon=True).start()
                self._workers += 1

    def _abandon(self, item: _Call, error: GraderTimeout) -> None:
        """Hand out ``error`` in place of ``item``'s answer (the lock is held)."""
        item.abandoned = True
        item.error = error
        self.timeouts += 1
        item.batch.open -= 1
        if not item.batch.open:
            item.batch.done.set()

    def run(self, call: Callable[[Any], Any], requests: Sequence[Any]) -> list[Any]:
        """``call(request)`` for each request, in order (``GraderCalls.run``)."""
        if self.timeout_s is None and self.concurrency == 1:
            return each_or_error(call, requests)
        if not requests:
            return []
        batch = _Batch(len(requests))
        pending = [_Call(request, batch) for request in requests]
        self._ensure_workers(min(self.concurrency, len(pending)))
        for item in pending:
            self._tasks.put((call, item))
        limit = self.timeout_s
        assert limit is not None
        while not batch.done.is_set():
            replace = 0
            with self._lock:
                now = time.monotonic()
                wake = now + limit  # no call running yet: one starts as soon as a worker is free
                for item in pending:
                    if item.closed or item.abandoned or item.started is None:
                        continue
                    if now - item.started < limit:
                        wake = min(wake, item.started + limit)
                        continue
                    waited = now - item.started
                    self._abandon(item, GraderTimeout(f"no answer within {limit:g} s (waited {waited:.1f} s)"))
                    worker = item.worker
                    if worker is not None:
                        # Retire the worker (it exits once the call returns, if ever) and start another.
                        worker.retired = True
                        self._workers -= 1
                        replace += 1
            if replace:
                self._ensure_workers(min(self.concurrency, len(pending)))
            if not batch.done.is_set():
                batch.done.wait(max(0.0, wake - time.monotonic()))
        return [item.error if item.error is not None else item.answer for item in pending]

    def close(self) -> None:
        """Let the idle threads exit (a hung one is a daemon and dies with the process)."""
        with self._lock:
            for _ in range(self._workers):
                self._tasks.put(None)
            self._workers = 0


class GraderCalls:
    """Runs a grader function on a list of requests in worker processes (``whileai.isolation``), each call within
    its time limit.

    The requests go to up to ``concurrency`` workers at once (one for a grader that is not thread-safe), each worker
    started on the first call and kept for the next. A call past its limit costs its own request (a
    ``GraderTimeout``): its worker is killed with what it started, and another takes the next request. The caller
    waits on the workers' pipes, waking when an answer comes or the earliest call in flight reaches its limit.

    A grader that must share the calling process (a model it holds on the GPU, which a forked process cannot use;
    state it keeps for the caller) declares ``in_process = True``: its calls then run on threads here
    (``_InProcess``), with a limit that holds only where the call lets other threads run.

    Args:
        timeout_s: the longest one call may take, in seconds; None: no limit.
        concurrency: how many calls may run at once (1 for a grader that is not thread-safe).
        in_process: run the calls on threads of this process instead.

    Example:
        >>> GraderCalls(timeout_s=5.0).run(lambda x: x * 2, [1, 2])
        [2, 4]
        >>> import time
        >>> type(GraderCalls(timeout_s=0.2).run(lambda x: time.sleep(5), [0])[0]).__name__
        'GraderTimeout'
    """

    def __init__(self, timeout_s: float | None, concurrency: int = 1, in_process: bool = False) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be a number > 0 or None, got {timeout_s!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
        self.timeout_s = timeout_s
        self.concurrency = int(concurrency)
        self.timeouts = 0
        self._threads = _InProcess(timeout_s, concurrency) if in_process else None
        self._function: Callable[..., Any] | None = None
        self._workers: list[Worker] = []

    def run(self, call: Callable[..., Any], requests: Sequence[Any], spread: bool = False) -> list[Any]:
        """``call(request)`` (``call(*request)`` with ``spread``) for each request, in order; an exception (or a
        ``GraderTimeout``) stands in for the answer of a call that raised (or ran over)."""
        if not requests:
            return []
        if self._threads is not None:
            answers = self._threads.run(call if not spread else lambda request: call(*request), requests)
            self.timeouts = self._threads.timeouts
            return answers
        if call is not self._function:  # workers serve the function they were started with
            self.close()
            self._function = call
        while len(self._workers) < min(self.concurrency, len(requests)):
            self._workers.append(Worker(call))
        workers = self._workers[: len(requests)]
        answers: list[Any] = [None] * len(requests)
        for start, worker in enumerate(workers):  # every worker its share, in order; each answers as it goes
            worker.send([(i, requests[i]) for i in range(start, len(requests), len(workers))], spread)
        limit = self.timeout_s
        try:
            while busy := [w for w in workers if w.pending]:
                soonest = min(w.started_call or 0.0 for w in busy)
                wait_s = None if limit is None else max(0.0, soonest + limit - time.monotonic())
                for worker in wait_for_any(busy, wait_s):
                    began = worker.started_call or time.monotonic()
                    index, answer = worker.receive(None if limit is None else began + limit)
                    if worker.pid is None and isinstance(answer, CallTimeout):  # an answer begun and not finished
                        answer = GraderTimeout(f"no whole answer within {limit:g} s ({answer})")
                        self.timeouts += 1
                    answers[index] = answer
                    if worker.pid is None:  # it died on that call: the rest of its share goes to a new one
                        worker.send([(i, requests[i]) for i in worker.kill()], spread)
                now = time.monotonic()
                for worker in [
                    w for w in busy if limit is not None and w.pending and now - (w.started_call or now) >= limit
                ]:
                    waited = now - (worker.started_call or now)
                    over, *rest = worker.kill()  # with what it started; a new worker takes the rest of its share
                    answers[over] = GraderTimeout(f"no answer within {limit:g} s (waited {waited:.1f} s)")
                    self.timeouts += 1
                    worker.send([(i, requests[i]) for i in rest], spread)
        except BaseException:  # Ctrl-C, or the caller's own error: no call is left running
            for worker in workers:
                worker.kill()
            raise
        return answers

    def close(self) -> None:
        """End the workers (a call in flight with them)."""
        if self._threads is not None:
            self._threads.close()
        for worker in self._workers:
            worker.kill()
        self._workers = []
        self._function = None
