"""``GroupwiseGrading``: the MiMo-V2.6 groupwise grader as one object (report, section 4.3).

The object holds a grader and the report's knobs and uses them three ways:

- ``check_spread(rows)``: grade a sample of passes before any GPU is spent and refuse a grader whose scores do not
  vary (the spread gate).
- ``shape(rewards, prompts, completions, group_size)``: the shaped rewards of a batch of consecutive groups.
- ``trl_reward(verifier, num_generations)``: a reward function for TRL's ``GRPOTrainer`` that returns
  ``A'_i + mean(R)`` so that TRL's group-mean subtraction yields equation 3 exactly (its calling convention in
  ``whileai.grading.trl``, read when it is called).

Advantage mode (GAR, section 4.3.2) calls the grader once per group with every rollout and moves the positive
advantage among the passes; reward mode (GRS, section 4.3.1) calls it once per pass with the task's rubric and
multiplies the verifier's reward by the scores (equation 2).

Nothing a grader does raises into the caller: an exception or an unusable answer makes that group fall back to its
original advantages (or rewards), counted in ``stats`` with its reason. This module does no I/O and imports no
trainer; the HTTP judge, the rows files and TRL live elsewhere.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from whileai.defaults import (
    GRADER_CONCURRENCY,
    GRADER_TIMEOUT_S,
    GROUPWISE_CAP,
    GROUPWISE_FLOOR,
    GROUPWISE_HACK_ZERO,
    GROUPWISE_MIN_FACTOR,
    GROUPWISE_MODE,
    VERIFIER_TIMEOUT_S,
)
from whileai.errors import GraderUnavailable
from whileai.grading.answers import UnusableAnswer, read_group_answer, read_pass_answer
from whileai.grading.calls import GraderCalls, check_grader_call
from whileai.grading.gate import check_spread_rows
from whileai.grading.group import (
    GradedGroup,
    Mode,
    OpenedGroup,
    describe,
    failure_kind,
    failure_reason,
    new_group,
    widen,
)
from whileai.grading.knobs import GradingKnobs, Knob, SpreadThresholds, checked
from whileai.grading.tally import GradingStats
from whileai.methods import centered, hack_rewards, positive_passes, redistribute_checked, synthesize_reward
from whileai.rows.rewards import verifier_reward
from whileai.rows.text import prompt_text

__all__ = ["GradedGroup", "GroupwiseGrading", "failure_kind"]


Grader = Callable[..., Any]
Request = tuple[Sequence[float], Sequence[Any], Sequence[Any], str | None, Sequence[bool] | None, bool]
RubricSource = Mapping[str, Any] | Callable[[str, list[dict[str, Any]]], Any] | None


class GroupwiseGrading:
    """A grader that tells passing rollouts apart, with the MiMo-V2.6 knobs (section 4.3).

    Args:
        grader: advantage mode: ``grader(group) -> {"ranking": [...]} | {"factors": {...}}`` with optional
            ``"hacks"``, where ``group`` is a list of ``{"index", "prompt", "completion", "reward", "passed"}``.
            Reward mode: ``grader(item, rubric) -> {"solution": s, "behavior": b}`` for one pass. Optional batch
            methods answer many at once: ``grade_groups(groups)`` (advantage mode), ``score_passes(requests)``
            (reward mode).
        mode: ``"advantage"`` (GAR) or ``"reward"`` (GRS).
        cap: upper bound on lambda in equation 3.
        min_factor: the factor of the worst-ranked pass.
        hack_zero: treat a confirmed hack as a failure: out of the passes, with a failure's reward (the lowest reward
            in its group, never above 0: 0 with a binary verifier, -1 with a +-1 one), so its advantage is the
            failures'.
        hack_reward: the reward a confirmed hack gets instead of a failure's (None: a failure's).
        floor: lower bound on each score in equation 2 (reward mode).
        rubrics: reward mode: a mapping task_id -> rubric, or ``write(task_id, group) -> rubric`` called once per
            task on the first group seen and cached; None: the grader's own ``rubric_writer`` when it has one (the
            judge's scorer), else the grader gets ``rubric=None``.
        spread: the spread gate's thresholds (``whileai.grading.knobs.SpreadThresholds``; its defaults when None).
        timeout_s: the longest one call of a plain grader function may take (None: no limit); a call that runs over
            makes its group fall back, counted as ``grader timed out``. A plain function runs in a worker process
            (``whileai.grading.calls``), which holds it to the limit whatever it does, keeps its prints off stdout
            and ends what it forks; one that declares ``in_process = True`` (a model on the GPU) runs on a thread
            here. A grader with a batch method (the judge) keeps its own timeouts.
        concurrency: groups graded at once by a grader that declares ``thread_safe = True`` (others: one at a time).

    Example:
        >>> gar = GroupwiseGrading(grader=lambda group: {"ranking": [g["index"] for g in group if g["passed"]]})
        >>> gar.shape([1, 1, 0, 0], ["p"] * 4, ["a", "b", "c", "d"], group_size=4)
        [1.1666666666666665, 0.8333333333333333, 0.0, 0.0]
    """

    # Each knob is read from ``self.knobs`` and set through it, so its bounds are checked in one place.
    mode: Mode = Knob()
    cap: float = Knob()
    min_factor: float = Knob()
    hack_zero: bool = Knob()
    hack_reward: float | None = Knob()
    floor: float = Knob()

    def __init__(
        self,
        grader: Grader,
        mode: Mode = GROUPWISE_MODE,
        *,
        cap: float = GROUPWISE_CAP,
        min_factor: float = GROUPWISE_MIN_FACTOR,
        hack_zero: bool = GROUPWISE_HACK_ZERO,
        hack_reward: float | None = None,
        floor: float = GROUPWISE_FLOOR,
        rubrics: RubricSource = None,
        spread: SpreadThresholds | None = None,
        timeout_s: float | None = GRADER_TIMEOUT_S,
        concurrency: int = GRADER_CONCURRENCY,
    ) -> None:
        if not callable(grader):
            raise TypeError(f"grader must be callable, got {type(grader).__name__}")
        # One declaration of each knob's bounds (whileai.grading.knobs), which the recipe's grading section shares.
        knobs = checked(
            GradingKnobs,
            mode=mode,
            cap=cap,
            min_factor=min_factor,
            hack_zero=hack_zero,
            hack_reward=hack_reward,
            floor=floor,
            timeout_s=timeout_s,
        )
        check_grader_call(grader, knobs.mode)
        if isinstance(concurrency, bool) or not isinstance(concurrency, numbers.Integral) or concurrency < 1:
            raise ValueError(f"concurrency: a positive integer is needed (got {concurrency!r})")
        if rubrics is None and knobs.mode == "reward":
            rubrics = getattr(grader, "rubric_writer", None)  # a judge scorer writes each task's rubric itself
        if rubrics is not None and not (isinstance(rubrics, Mapping) or callable(rubrics)):
            raise ValueError(f"rubrics must be a mapping task_id -> rubric or a callable, got {type(rubrics).__name__}")
        if spread is not None and not isinstance(spread, SpreadThresholds):
            raise ValueError(f"spread must be a SpreadThresholds, got {type(spread).__name__}")

        self.grader = grader
        self.knobs: GradingKnobs = knobs
        self.rubrics = rubrics
        self.spread = spread if spread is not None else SpreadThresholds()
        self.stats = GradingStats(mode=knobs.mode)
        self._rubric_cache: dict[str, Any] = {}
        thread_safe = getattr(grader, "thread_safe", False) is True
        in_process = getattr(grader, "in_process", False) is True
        self._calls = GraderCalls(knobs.timeout_s, int(concurrency) if thread_safe else 1, in_process)
        # The worker threads hold the calls object, not this one: when this object goes, they are let go too.
        weakref.finalize(self, self._calls.close)

    @property
    def timeout_s(self) -> float | None:
        """The time limit of one call of a plain grader function (None: no limit)."""
        return self._calls.timeout_s

    # ------------------------------------------------------------------ display

    @property
    def grader_name(self) -> str:
        grader = self.grader
        return getattr(grader, "__name__", None) or getattr(grader, "name", None) or type(grader).__name__

    def __repr__(self) -> str:
        if self.mode == "advantage":
            knobs = f"cap={self.cap}, min_factor={self.min_factor}, hack_zero={self.hack_zero}"
            if self.hack_reward is not None:
                knobs += f", hack_reward={self.hack_reward}"
        else:
            if self.rubrics is None:
                rubrics = "None"
            elif isinstance(self.rubrics, Mapping):
                rubrics = f"{len(self.rubrics)} task(s)"
            else:
                rubrics = getattr(self.rubrics, "__name__", type(self.rubrics).__name__)
            knobs = f"floor={self.floor}, rubrics={rubrics}"
        return f"GroupwiseGrading(mode={self.mode}, grader={self.grader_name}, {knobs})"

    def figures(self) -> dict[str, Any]:
        """``stats`` as JSON-ready values, with the grader's own counters under ``"judge"`` when it keeps them (the
        HTTP judge: calls, retries, cache hits, tokens, latency p50/p95, failures by kind)."""
        figures = self.stats.as_dict()
        own = getattr(self.grader, "stats", None)
        if own is not None and callable(getattr(own, "as_dict", None)):
            figures["judge"] = own.as_dict()
        return figures

    def counters(self) -> tuple[Any, Any]:
        """``stats`` and the grader's own counters (a judge's calls and tokens) as they are now, for
        ``restore_counters``: the spread gate of a training run grades with the run's object, and its groups and
        calls are not the run's."""
        own = getattr(self.grader, "stats", None)
        return self.stats.snapshot(), own.snapshot() if callable(getattr(own, "snapshot", None)) else None

    def restore_counters(self, counters: tuple[Any, Any]) -> None:
        """Put back what ``counters`` took."""
        self.stats, own = counters[0], counters[1]
        if own is not None:
            self.grader.stats.restore(own)

    # ------------------------------------------------------------------ one group

    def grade_group(
        self,
        rewards: Sequence[float],
        prompts: Sequence[str],
        completions: Sequence[str],
        *,
        task_id: str | None = None,
        passed: Sequence[bool] | None = None,
        send: bool = True,
    ) -> GradedGroup:
        """Grade one group and count it in ``stats``; never raises on anything the grader does.

        Args:
            rewards: R_i from the verifier, ``[G]``.
            prompts, completions: the texts the grader reads, ``[G]``.
            task_id: the group's task; defaults to its first prompt.
            passed: which members passed; by default ``R_i > 0``.
            send: False records the group without calling the grader (all-pass or all-fail groups in training).
        """
        return self.grade_many([(rewards, prompts, completions, task_id, passed, send)])[0]

    def grade_many(
        self,
        requests: Sequence[Request],
        preflight: bool = False,
        record: bool = True,
        shape: bool = True,
        fresh: bool = False,
    ) -> list[GradedGroup]:
        """Grade several groups given as ``(rewards, prompts, completions, task_id, passed, send)``: a grader with a
        batch method sees all of them in one call (the judge runs them concurrently), any other grader is called
        group by group. ``preflight`` lets ``GraderUnavailable`` through (the spread gate exits 4 on it);
        ``record=False`` keeps them out of ``stats`` (the gate's control groups); ``shape=False`` leaves out
        equation 3 (the gate reads only the scores, hacks and failures); ``fresh`` asks a grader whose batch method
        takes ``fresh`` (the judge) past its answer cache, so a control is a new answer, not the old one again."""
        opened: list[OpenedGroup] = []
        graded: list[GradedGroup] = []
        partial: list[tuple[int, list[int], list[float]]] = []
        for rewards, prompts, completions, task_id, passed, send in requests:
            values = [verifier_reward(r) for r in rewards]
            task = str(task_id) if task_id is not None else str(prompts[0] if prompts else "")
            group, group_prompts, group_completions, members = new_group(task, values, passed, prompts, completions)
            if members is not None:
                partial.append((len(graded), members, values))
            graded.append(group)
            if send and any(group.passed):
                opened.append(OpenedGroup(group, group_prompts, group_completions, rendered=True))
        return self._finish(graded, opened, partial, preflight=preflight, record=record, shape=shape, fresh=fresh)

    def _finish(
        self,
        graded: list[GradedGroup],
        opened: list[OpenedGroup],
        partial: list[tuple[int, Any, list[float]]],
        *,
        preflight: bool,
        record: bool,
        shape: bool = True,
        fresh: bool = False,
    ) -> list[GradedGroup]:
        """Ask the grader about the opened groups, close them, count every group in ``stats``, and widen the groups
        ``partial`` names (a position in ``graded``, its members, its rewards) back to their whole size."""
        if opened:
            start = time.perf_counter()
            if self.mode == "advantage":
                requests = [o.items() for o in opened]
                answers = self._ask(
                    self.grader, "grade_groups", requests, single=True, preflight=preflight, fresh=fresh
                )
                close = self._close_advantage
                for o, answer in zip(opened, answers, strict=True):
                    o.group.grader_calls = 1
                    close(o.group, answer, shape)
            else:
                for group, count in self._grade_reward(opened, preflight=preflight, fresh=fresh):
                    group.grader_calls = count
            share = (time.perf_counter() - start) / len(opened)
            for o in opened:
                o.group.seconds = share
        if record:
            self.stats.record_groups(graded, self.hack_zero)
        for position, members, values in partial:
            widen(graded[position], members, values)
        return graded

    def _ask(
        self,
        grader: Grader,
        batch_method: str,
        requests: list[Any],
        single: bool,
        preflight: bool,
        fresh: bool = False,
    ) -> list[Any]:
        """The grader's answers to ``requests``, an exception standing in for an answer that raised.

        A grader that has ``batch_method`` (``grade_groups`` or ``score_passes``) answers the whole list in one call
        and may put an exception in place of any answer (one that takes ``timeout_s`` is given the time limit, which
        it keeps per request); others are called once per request, each within the time limit (``GraderTimeout``
        stands in for an answer that ran over). In a preflight (the spread check) a
        ``GraderUnavailable`` propagates, so the command line can exit 4; in training it is one more fallback.
        """
        batch = getattr(grader, batch_method, None)
        if callable(batch):
            takes = inspect.signature(batch).parameters
            if fresh and "fresh" in takes:
                batch = functools.partial(batch, fresh=True)
            if "timeout_s" in takes:  # a batch that keeps each request's time limit itself (the scripted rule)
                batch = functools.partial(batch, timeout_s=self.timeout_s)
            try:
                answers = list(batch(requests))
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit too: a grader's misdeed is a fallback, not the run's end
                if preflight and isinstance(exc, GraderUnavailable):
                    raise
                return [exc] * len(requests)
            if len(answers) != len(requests):
                error = RuntimeError(f"{batch_method} returned {len(answers)} answers for {len(requests)} requests")
                return [error] * len(requests)
            return answers
        answers = self._calls.run(grader, requests, spread=not single)
        for answer in answers:
            # A KeyboardInterrupt raised inside a grader on a worker thread is still the user's Ctrl-C.
            if isinstance(answer, KeyboardInterrupt) or (preflight and isinstance(answer, GraderUnavailable)):
                raise answer
        return answers

    def _close_advantage(self, group: GradedGroup, answer: Any, shape: bool = True) -> None:
        """Validate one group's answer and redistribute (unless ``shape`` is False), or record why the group falls
        back."""
        if isinstance(answer, BaseException):
            group.fail(failure_kind(answer), failure_reason(answer), answer)
            return
        group.graded = True
        passes = [i for i, ok in enumerate(group.passed) if ok]
        try:
            read = read_group_answer(
                answer, size=len(group.rewards), passes=passes, min_factor=self.min_factor, hack_zero=self.hack_zero
            )
        except UnusableAnswer as exc:
            group.fail("unusable answer", f"unusable answer: {exc}", exc)
            return
        except Exception as exc:  # an answer object that misbehaves while being read (a raising __eq__, ...)
            group.fail("unusable answer", f"unusable answer: {describe(exc)}", exc)
            return

        hack_zero = self.hack_zero
        hacks = read.hacks
        group.hacks = list(hacks)
        kept = [i for i in passes if i not in hacks] if hack_zero and hacks else passes
        if hack_zero and hacks:
            group.effective_rewards = hack_rewards(group.rewards, hacks, self.hack_reward)
        effective = group.effective_rewards
        factors = read.factors
        group.factors = dict(factors)
        # A single pass has nothing to be told apart from: it gives no score to the spread gate or the counters.
        group.scores = [factors.get(i, 1.0) for i in kept] if len(kept) > 1 else []
        if not shape:
            return
        # Equation 3 (redistribute_result) on an answer read_group_answer validated: finite rewards, each factor a
        # float in (0, 1] for a kept pass, distinct passes, a checked cap. A fallback here is arithmetic, not the
        # grader's fault: a group with no failure (nothing to move) or no pass left once its hacks are zeroed keeps
        # its plain centered advantages.
        given = [1.0] * len(effective)
        for i, factor in factors.items():
            given[i] = factor
        moved = redistribute_checked(effective, centered(effective), given, kept, self.cap)
        group.lam = moved.lam
        group.capped = moved.capped
        group.redistributed = list(moved.advantages)
        mean = sum(effective) / len(effective)
        group.shaped = [a + mean for a in moved.advantages]

    def _rubric(self, task_id: str, items: list[dict[str, Any]]) -> Any:
        if self.rubrics is None:
            return None
        if isinstance(self.rubrics, Mapping):
            if task_id not in self.rubrics:
                raise LookupError(f"no rubric for task {task_id!r}")
            return self.rubrics[task_id]
        if task_id not in self._rubric_cache:
            self._rubric_cache[task_id] = self.rubrics(task_id, items)
        return self._rubric_cache[task_id]

    def _grade_reward(
        self, opened: list[OpenedGroup], preflight: bool = False, fresh: bool = False
    ) -> list[tuple[GradedGroup, int]]:
        """Score every pass of the groups against their rubrics (equation 2), all passes in one grader batch.

        Returns each group with the grader calls made for it.
        """
        requests: list[tuple[dict[str, Any], Any]] = []
        owners: list[GradedGroup] = []
        counted: list[tuple[GradedGroup, int]] = []
        for one in opened:
            group, items = one.group, one.items()
            try:
                rubric = self._rubric(group.task_id, items)
            except LookupError as exc:
                group.fail("no rubric", f"no rubric: {exc}", exc)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                if preflight and isinstance(exc, GraderUnavailable):
                    raise
                group.fail(failure_kind(exc), f"rubric writer raised: {describe(exc)}", exc)
            if group.reason is not None:
                counted.append((group, 0))
                continue
            passes = [item for item in items if item["passed"]]
            requests.extend((item, rubric) for item in passes)
            owners.extend([group] * len(passes))
            counted.append((group, len(passes)))
        answers = (
            self._ask(self.grader, "score_passes", requests, single=False, preflight=preflight, fresh=fresh)
            if requests
            else []
        )
        scored: dict[int, list[tuple[int, Any]]] = {}
        for group, (item, _), answer in zip(owners, requests, answers, strict=True):
            scored.setdefault(id(group), []).append((item["index"], answer))
        for group, count in counted:
            if group.reason is not None or not count:
                continue
            shaped = list(group.rewards)
            scores: list[float] = []
            for i, answer in scored[id(group)]:
                if isinstance(answer, BaseException):
                    group.fail(failure_kind(answer), failure_reason(answer), answer)
                    break
                try:
                    read = read_pass_answer(answer)
                except UnusableAnswer as exc:
                    group.fail("unusable answer", f"unusable answer: {exc}", exc)
                    break
                except Exception as exc:  # an answer object that misbehaves while being read
                    group.fail("unusable answer", f"unusable answer: {describe(exc)}", exc)
                    break
                shaped[i] = synthesize_reward(group.rewards[i], read.solution, read.behavior, floor=self.floor)
                scores.append(max(self.floor, read.solution) * max(self.floor, read.behavior))
            if group.reason is None:
                group.graded = True
                group.shaped = shaped
                group.scores = scores
        return counted

    # ------------------------------------------------------------------ batches

    def _groups_of(self, n: int, group_size: int) -> range:
        if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral) or group_size < 1:
            raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
        if n % group_size:
            raise ValueError(
                f"the batch holds {n} completions, not a multiple of the group size {group_size}: "
                "each prompt's completions must come as one consecutive group"
            )
        return range(0, n, int(group_size))

    def grade_batch(
        self,
        rewards: Sequence[float],
        prompts: Sequence[Any],
        completions: Sequence[Any],
        group_size: int,
        task_id: str | Sequence[str] | None = None,
    ) -> list[GradedGroup]:
        """Grade a batch of consecutive groups the way training does.

        Advantage mode sends only groups with a pass above the group's mean to the grader (with a binary reward, the
        mixed groups: an all-pass or all-fail group has no advantage to move); reward mode sends every group with a
        pass (GRS is meant for high-pass-rate tasks, where whole groups pass). Conversational prompts and completions
        (lists of messages) are read as text, and only those of the groups sent to the grader are rendered.
        """
        n = len(rewards)
        if len(prompts) != n or len(completions) != n:
            raise ValueError(f"got {n} rewards, {len(prompts)} prompts and {len(completions)} completions")
        task_ids: list[Any] | None = None
        if not (isinstance(task_id, str) or task_id is None):
            task_ids = list(task_id)
            if len(task_ids) != n:
                raise ValueError(f"got {len(task_ids)} task ids for {n} completions")
        starts = self._groups_of(n, group_size)
        size = int(group_size)
        # Per completion only what every group needs (its reward as TRL stores it); the texts the grader reads are
        # rendered for the groups it is sent, once (TRL's batch of a few hundred conversations: most of this call's
        # own time).
        values = [verifier_reward(r) for r in rewards]
        advantage = self.mode == "advantage"
        graded: list[GradedGroup] = []
        opened: list[OpenedGroup] = []
        partial: list[tuple[int, list[int], list[float]]] = []
        for start in starts:
            stop = start + size
            chunk = values[start:stop]
            task = task_id if task_ids is None else task_ids[start]
            task = str(task) if task is not None else str(prompt_text(prompts[start]))
            group, group_prompts, group_completions, members = new_group(
                task, chunk, None, prompts[start:stop], completions[start:stop]
            )
            if members is not None:
                partial.append((len(graded), members, chunk))
            graded.append(group)
            # Advantage mode: only a group with a pass above its mean has advantage to move (a mixed group, with a
            # binary reward). Reward mode: every group with a pass.
            send = bool(positive_passes(group.rewards)) if advantage else True in group.passed
            if send:
                opened.append(OpenedGroup(group, group_prompts, group_completions, rendered=False))
        return self._finish(graded, opened, partial, preflight=False, record=True)

    def shape(
        self,
        rewards: Sequence[float],
        prompts: Sequence[Any],
        completions: Sequence[Any],
        group_size: int,
        task_id: str | Sequence[str] | None = None,
    ) -> list[float]:
        """The shaped rewards of a batch of consecutive groups of ``group_size``.

        Advantage mode: ``A'_i + mean(R)`` per group (equation 3 after a group-mean subtraction); reward mode:
        ``R_test * max(floor, S_sol) * max(floor, S_beh)`` (equation 2). Groups that fell back keep their rewards.
        """
        return [s for g in self.grade_batch(rewards, prompts, completions, group_size, task_id) for s in g.shaped]

    # ------------------------------------------------------------------ spread gate

    # The spread gate on rows, ``gar.check_spread(rows)``: the gate's one function, its signature and docstring.
    check_spread = check_spread_rows

    # ------------------------------------------------------------------ TRL

    def trl_reward(
        self,
        verifier: Callable[..., Sequence[float]],
        num_generations: int,
        *,
        gather: Any = None,
        on_graded: Callable[[list[GradedGroup], Any], None] | None = None,
        watch: Any = None,
        verifier_timeout_s: float | None = VERIFIER_TIMEOUT_S,
    ) -> Callable[..., list[float]]:
        """A reward function for TRL's ``GRPOTrainer`` that grades each group with this object.

        TRL calls it by keyword (``prompts``, ``completions``, ``completion_ids``, every extra dataset column,
        ``trainer_state``, ``log_metric``, ``log_extra``) on ``num_generations`` consecutive completions per prompt.
        It calls ``verifier`` with the same keywords, grades the batch as :meth:`grade_batch` does and returns
        ``A'_i + mean(R)``, so TRL's group-mean subtraction yields equation 3 exactly; set ``scale_rewards="none"``
        so TRL's division by the group's std does not rescale the moved mass. A ``task_id`` or ``scenario_id``
        dataset column names the task; otherwise the prompt does. When TRL passes ``log_metric``, the batch's grader
        figures are logged under ``groupwise/`` and the pass rate as ``whileai/pass_rate``; with ``log_extra``, each
        completion's verifier reward and group go into the completion logs as ``whileai_reward`` and
        ``whileai_group`` (what ``whileai spread`` reads from a run's ``completions/*.parquet``).

        Args:
            verifier: a TRL-style reward function that says pass (> 0) or fail.
            num_generations: the group size G.
            gather: with several training processes, TRL hands each its own slice and a group may straddle two.
                A ``BatchGather`` collects the slices in rank order, rank 0 grades whole groups once, and each
                process gets its slice back (``whileai.training.distributed`` builds one on torch.distributed).
            on_graded: called on the grading process with each batch's groups and TRL's ``trainer_state``.
            watch: a ``whileai.grading.watch.SpreadWatch`` that sees each training batch's groups on the grading
                process; its checks' figures are logged with the batch's (``whileai/watch/*``).
            verifier_timeout_s: the verifier's limit on one batch, past which the batch is unscorable (it runs in a
                process of its own: ``whileai.rows.verdicts.verifier_rewards``); None: no limit.

        Raises (when called):
            ValueError: a batch whose length is not a multiple of ``num_generations``, or a verifier that returns the
                wrong number of rewards. These are set-up errors, not grader misbehaviour.
        """
        from whileai.grading.trl import groupwise_reward_function  # TRL's calling convention, read when asked

        return groupwise_reward_function(
            self, verifier, num_generations, gather=gather, on_graded=on_graded, watch=watch,
            verifier_timeout_s=verifier_timeout_s,
        )  # fmt: skip
