"""A verifier's answer for one response, whatever it was, read the same way in TRL and in verl.

A verifier may answer a number (Python, numpy or a one-element torch tensor, a bool), ``None`` (unscorable), a dict
with a ``score`` and any other keys (verl's convention), something that is no reward at all, or raise. None of these
stops a training step: :func:`read_verdict` turns an answer into a :class:`Verdict`, its reward NaN ("unscorable":
advantage 0, out of its group's mean) whenever it is not a reward, with the reason; :class:`VerifierFailures` counts
the reasons and says the first and every hundredth (a verifier that fails now and then does not flood the log), and
finds one that scored none of a few batches in a row: broken, for training to stop on.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from traceback import format_exc
from typing import Any

from whileai.defaults import VERIFIER_BROKEN_BATCHES, VERIFIER_TIMEOUT_S
from whileai.errors import Recurring, describe, function_label, raised_line
from whileai.isolation import CallTimeout, call_in_fork
from whileai.rows.rewards import verifier_reward

__all__ = ["Verdict", "VerifierFailures", "raised", "read_verdict", "verdict_of", "verifier_rewards"]


@dataclass(frozen=True)
class Verdict:
    """One response's verifier answer: ``reward`` (NaN when unscorable), ``fields`` (a dict answer's own keys,
    ``score`` included; empty for any other answer) and ``error`` (why the answer was no reward; empty when it was
    one, or a plain ``None``)."""

    reward: float
    fields: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def read_verdict(value: object) -> Verdict:
    """``value`` as a :class:`Verdict`; never raises.

    Example:
        >>> read_verdict(True), read_verdict(None).reward
        (Verdict(reward=1.0, fields={}, error=''), nan)
        >>> read_verdict({"score": 0.5, "pred": "B"}).fields
        {'score': 0.5, 'pred': 'B'}
        >>> read_verdict("yes").error
        "a reward is not a number: 'yes'"
    """
    if isinstance(value, Mapping):
        fields = {str(key): item for key, item in value.items()}
        if "score" not in fields:
            return Verdict(math.nan, fields, f"a dict without 'score' (keys: {', '.join(fields) or 'none'})")
        if isinstance(fields["score"], Mapping):
            return Verdict(math.nan, fields, "a dict whose 'score' is a dict")
        score = read_verdict(fields["score"])
        return Verdict(score.reward, fields, score.error)
    try:
        return Verdict(verifier_reward(value))
    except ValueError as error:
        return Verdict(math.nan, {}, str(error))


def raised(error: BaseException) -> Verdict:
    """The verdict of a verifier that raised ``error``: unscorable, with the exception said."""
    return Verdict(math.nan, {}, f"it raised {describe(error)}")


def verdict_of(call: Callable[[], object]) -> Verdict:
    """The verdict of what ``call`` returns, or of its exception."""
    try:
        value = call()
    except Exception as error:
        return raised(error)
    return read_verdict(value)


class VerifierFailures(Recurring):
    """How many responses a verifier gave no reward for (it raised, or answered something that is not one), by kind,
    and how many batches in a row it scored none of.

    Args:
        say: where the first failure and every hundredth are said (a log line).
        verifier: the user's function, named in what is said (its name, file and the line that raised).

    Attributes:
        first, last: the first and the latest failure, as said (naming the function); ``trace`` the latest one's
            traceback (``whileai --debug``).
        kinds: responses by kind of failure (the exception's type, ``timeout``, ``unusable answer``).
        broken: whether the latest ``VERIFIER_BROKEN_BATCHES`` batches were all unscored, and ``why`` (what the
            latest of them came to).
    """

    def __init__(self, say: Callable[[str], None], verifier: object = None) -> None:
        super().__init__()
        self.say, self.verifier = say, verifier
        self.first = self.last = self.trace = self.why = ""
        self.kinds: dict[str, int] = {}
        self.empty = Recurring()  # batches in which no completion got a reward
        self.in_a_row = self.responses = self.unscored = self._said = 0

    def batch(self, rewards: Sequence[float]) -> None:
        """A batch's rewards, counted; one whose every completion is unscorable (a sandbox down for a step) said the
        first time and in each hundred."""
        failed, self._said = self.count > self._said, self.count
        self.responses += len(rewards)
        self.unscored += sum(r != r for r in rewards)
        if not rewards or any(r == r for r in rewards):
            self.in_a_row = 0
            return
        self.in_a_row += 1
        self.why = self.last if failed else f"{self._name()}it answered None for every completion"
        if self.empty.add():
            self.say(
                f"whileai: the verifier scored none of a batch's {len(rewards)} completions ({self.empty.count} such "
                "batch(es) so far): they train on zero advantage, as TRL gives an unscorable completion"
            )

    @property
    def broken(self) -> bool:
        return self.in_a_row >= VERIFIER_BROKEN_BATCHES

    def figures(self, before: Any = None) -> dict[str, Any]:
        """What a run's record keeps: failures, their kinds, the first, and the completions left unscored; added to
        ``before``, the figures a resumed run recorded up to its checkpoint."""
        before = before if isinstance(before, Mapping) else {}
        kinds = dict(before.get("kinds") or {})
        for kind, responses in self.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + responses
        return {"failures": self.count + before.get("failures", 0), "kinds": kinds,
                "first": before.get("first") or self.first, "unscored": self.unscored + before.get("unscored", 0),
                "completions": self.responses + before.get("completions", 0)}  # fmt: skip

    def _name(self, line: int | None = None) -> str:
        return "" if self.verifier is None else f"{function_label(self.verifier, line)}: "

    def __call__(
        self, error: str, responses: int = 1, kind: str = "unusable answer", line: int | None = None, trace: str = ""
    ) -> None:
        self.last = f"{self._name(line)}{error}"
        self.first, self.trace = self.first or self.last, trace or self.trace
        self.kinds[kind] = self.kinds.get(kind, 0) + responses
        if self.add(responses):
            self.say(
                f"whileai: the verifier gave no reward ({self.count} response(s) so far): {self.last}; "
                "such a response counts as unscorable (advantage 0)"
            )


def verifier_rewards(
    verifier: Callable[..., Any],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    kwargs: Mapping[str, Any],
    failures: VerifierFailures,
    timeout_s: float | None = VERIFIER_TIMEOUT_S,
) -> list[float]:
    """A TRL-style verifier's reward of each completion, called by keyword as TRL calls it, each answer read by
    :func:`read_verdict` (a dict's ``score``, NaN for None). A verifier that raises (``sys.exit`` included), or
    answers no list of one reward a completion, makes its whole batch unscorable; an answer that is no reward makes
    its completion unscorable; both said and counted in ``failures`` with what came back and what to return instead,
    and so is a batch in which nothing got a reward. Nothing a verifier does stops the caller: a training step, the
    gate's sample or an evaluation decides what a failure means for it.

    A user's verifier runs in a process forked for the batch (``whileai.isolation``): held to ``timeout_s`` whatever
    it does (None: no limit), its prints kept off stdout, what it forks ended; whileai's own verifiers, and one that
    declares ``in_process = True``, run here.

    Example:
        >>> failures = VerifierFailures(print)
        >>> verifier_rewards(lambda prompts, completions, **kw: [1.0], ["p"] * 2, ["a", "b"], {}, failures)
        whileai: the verifier gave no reward (2 response(s) so far): it answered 1 rewards for 2 completions; return one reward per completion, in order (None for one it cannot score); such a response counts as unscorable (advantage 0)
        whileai: the verifier scored none of a batch's 2 completions (1 such batch(es) so far): they train on zero advantage, as TRL gives an unscorable completion
        [nan, nan]
    """  # noqa: E501
    if _in_process(verifier):
        rewards = _read_batch(verifier, prompts, completions, kwargs, failures)
    else:
        rewards = _read_in_fork(verifier, prompts, completions, kwargs, failures, timeout_s)
    failures.batch(rewards)
    return rewards


def _awaited(awaitable: Any) -> Any:
    """What an async verifier's answer comes to, run on an event loop of its own."""
    import asyncio

    async def answer() -> Any:
        return await awaitable

    return asyncio.run(answer())


def _in_process(verifier: Callable[..., Any]) -> bool:
    """whileai's own verifiers, and one that declares ``in_process = True``, run in the calling process."""
    function = verifier
    while isinstance(function, functools.partial):
        function = function.func
    return getattr(verifier, "in_process", False) is True or getattr(function, "__module__", "").startswith("whileai.")


class _Said:
    """What a verifier's batch said, in its own process: failures and TRL log calls, replayed by the caller."""

    def __init__(self) -> None:
        self.failures: list[tuple[Any, ...]] = []
        self.logged: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *failure: Any) -> None:
        self.failures.append(failure)

    def logger(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.logged.append((name, args, kwargs))


def _read_in_fork(
    verifier: Callable[..., Any],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    kwargs: Mapping[str, Any],
    failures: VerifierFailures,
    timeout_s: float | None,
) -> list[float]:
    """:func:`_read_batch` in a process forked for the batch (``whileai.isolation.call_in_fork``): it sees TRL's
    keywords as they are (environments, trainer state), its ``log_metric`` and ``log_extra`` calls are replayed
    here, and past ``timeout_s`` the batch is unscorable."""

    def batch() -> dict[str, Any]:
        said, keywords = _Said(), dict(kwargs)
        for name in ("log_metric", "log_extra"):
            if callable(keywords.get(name)):
                keywords[name] = said.logger(name)
        rewards = _read_batch(verifier, prompts, completions, keywords, said)  # type: ignore[arg-type]
        return {"rewards": rewards, "failures": said.failures, "logged": said.logged}

    expected = len(completions)
    answer = call_in_fork(batch, timeout_s)
    if isinstance(answer, CallTimeout):
        failures(f"it ran past its {timeout_s:g} s limit (verifier.timeout_s) on a batch of {expected}", expected,
                 "timeout")  # fmt: skip
        return [math.nan] * expected
    if isinstance(answer, BaseException):
        failures(f"{raised(answer).error} on a batch of {expected}", expected, type(answer).__name__)
        return [math.nan] * expected
    for failure in answer["failures"]:
        failures(*failure)
    for name, args, logged in answer["logged"]:
        kwargs[name](*args, **logged)
    return [float(r) for r in answer["rewards"]]


def _read_batch(
    verifier: Callable[..., Any],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    kwargs: Mapping[str, Any],
    failures: VerifierFailures,
) -> list[float]:
    """:func:`verifier_rewards` before its check of the whole batch."""
    expected = len(completions)
    one_each = "return one reward per completion, in order (None for one it cannot score)"
    try:
        output = verifier(prompts=prompts, completions=completions, **kwargs)
        if hasattr(output, "__await__"):  # an async verifier, as TRL takes them: run to its answer here
            output = _awaited(output)
        listed = hasattr(output, "__iter__") and not isinstance(output, (str, bytes, Mapping))
        answers = list(output) if listed else []  # a generator may raise on its way
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # sys.exit too: a verifier's misdeed is its batch's, never the caller's end
        failures(f"{raised(error).error} on a batch of {expected}; fix it, or have it return None where it cannot "
                 "score", expected, type(error).__name__, raised_line(verifier, error), format_exc())  # fmt: skip
        return [math.nan] * expected
    if not listed:
        failures(f"it answered {type(output).__name__}, not a list of rewards; {one_each}", expected)
        return [math.nan] * expected
    if len(answers) != expected:
        failures(f"it answered {len(answers)} rewards for {expected} completions; {one_each}", expected)
        return [math.nan] * expected
    rewards = []
    for answer in answers:
        verdict = read_verdict(answer)
        if verdict.error:
            failures(f"{verdict.error}; a reward is a number, None, or a dict with a 'score'")
        rewards.append(verdict.reward)
    return rewards
