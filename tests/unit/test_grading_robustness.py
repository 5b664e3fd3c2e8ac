"""Nothing a grader or a verifier returns stops a run or corrupts its signal: arrays as answers, inf rewards, a hung
grader, concurrency, and the batches TRL really sends (empty, evaluation with its own group size, G = 1)."""

from __future__ import annotations

import math
import multiprocessing
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import whileai as wai
from whileai.methods import redistribute


def returning(answer):
    def grader(group):
        return answer

    return grader


def by_order(group):
    return {"ranking": [g["index"] for g in group if g["passed"]]}


def trl_advantages(shaped: list[float], size: int) -> list[float]:
    """TRL 1.16's advantage with one reward function and scale_rewards="none": nan-aware group mean subtracted,
    then nan_to_num (grpo_trainer.py, _generate_and_score_completions)."""
    out = []
    for start in range(0, len(shaped), size):
        group = shaped[start : start + size]
        finite = [r for r in group if not math.isnan(r)]
        mean = sum(finite) / len(finite) if finite else math.nan
        for r in group:
            a = r - mean
            out.append(0.0 if math.isnan(a) else max(min(a, 3.4e38), -3.4e38))
    return out


# ---------------------------------------------------------------- answers as arrays


@pytest.mark.parametrize(
    "answer",
    [
        {"ranking": np.array([1, 0])},
        {"ranking": [np.int64(1), np.array([0])]},
        {"ranking": range(1, -1, -1)},
        {"ranking": np.array([1, 0]), "hacks": np.array([], dtype=np.int64)},
    ],
)
def test_a_ranking_given_as_an_array_is_read_as_the_list_it_holds(answer) -> None:
    gar = wai.GroupwiseGrading(grader=returning(answer))
    (group,) = gar.grade_batch([1, 1, 0, 0], ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.reason is None and group.factors == {1: 1.0, 0: 0.5}


def test_hacks_given_as_an_array_are_zeroed() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": np.array([0]), "hacks": np.array([1])}))
    (group,) = gar.grade_batch([1, 1, 0, 0], ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.reason is None and group.hacks == [1] and group.effective_rewards == [1.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------------- non-finite rewards


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, None, 10**400, 1e39, -3.5e38])
def test_an_unscorable_reward_is_left_out_and_the_rest_of_its_group_is_graded(bad) -> None:
    gar = wai.GroupwiseGrading(grader=by_order)
    reward = gar.trl_reward(lambda **kw: [bad, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0], num_generations=4)
    shaped = reward(prompts=["p"] * 4 + ["q"] * 4, completions=list("abcdefgh"))
    assert math.isnan(shaped[0])  # TRL leaves a NaN member out of the group's mean and gives it advantage 0
    advantages = trl_advantages(shaped, 4)
    # the scorable members [1, 1, 0] are graded as a group of three, by the grader that saw only them
    assert advantages[:4] == pytest.approx([0.0, *redistribute([1, 1, 0], {0: 1.0, 1: 0.5})])
    assert advantages[4:] == pytest.approx([2 / 3, 1 / 3, -0.5, -0.5])  # the other group is graded as usual
    assert gar.stats.fallbacks == {} and gar.stats.unscorable == 1 and gar.stats.grader_calls == 2


# ---------------------------------------------------------------- hung and concurrent graders


@pytest.mark.parametrize("thread_safe", [False, True])
def test_a_hung_grader_is_a_counted_fallback_not_a_hang(thread_safe) -> None:
    release = threading.Event()

    def grader(group):
        if group[0]["prompt"] == "hang":
            release.wait(60)
        return by_order(group)

    grader.thread_safe = thread_safe
    gar = wai.GroupwiseGrading(grader=grader, timeout_s=1.0, concurrency=2)  # room for a loaded CI machine
    started = time.monotonic()
    groups = gar.grade_batch([1, 1, 0, 0] * 3, ["ok"] * 4 + ["hang"] * 4 + ["ok"] * 4, ["a"] * 12, group_size=4)
    waited = time.monotonic() - started
    assert groups[0].reason is None
    assert groups[1].reason.startswith("grader timed out") and groups[1].shaped == [1.0, 1.0, 0.0, 0.0]
    # a fresh worker grades the group after the hung one, thread-safe grader or not: one hung call, one fallback
    assert groups[2].reason is None and groups[2].factors == {0: 1.0, 1: 0.5}
    assert waited < 30  # bounded by the time limit, not by the grader
    assert gar.stats.fallbacks == {"grader timed out": 1}
    # the next batch, with the hung call still inside the grader, is graded too
    (after,) = gar.grade_batch([1, 1, 0, 0], ["ok"] * 4, ["a"] * 4, group_size=4)
    release.set()
    assert after.reason is None


def test_a_grader_that_is_not_thread_safe_runs_twice_at_once_only_beside_a_call_it_gave_up() -> None:
    inside, most = [0], [0]
    lock = threading.Lock()
    release = threading.Event()

    def grader(group):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            if group[0]["prompt"] == "hang":
                release.wait(10)  # still running when the next groups are graded
            return by_order(group)
        finally:
            with lock:
                inside[0] -= 1

    grader.in_process = True  # threads of this process, whose counts the test reads
    gar = wai.GroupwiseGrading(grader=grader, timeout_s=0.5)
    groups = gar.grade_batch([1, 1, 0, 0] * 4, ["ok"] * 16, ["a"] * 16, group_size=4)
    assert all(g.reason is None for g in groups) and most[0] == 1  # one at a time while none runs over
    prompts = ["hang"] * 4 + ["ok"] * 12
    groups = gar.grade_batch([1, 1, 0, 0] * 4, prompts, ["a"] * 16, group_size=4)
    assert groups[0].reason.startswith("grader timed out") and all(g.reason is None for g in groups[1:])
    release.set()
    time.sleep(0.1)
    assert most[0] == 2  # the given-up call and, one after the other, the groups graded beside it


@pytest.mark.parametrize("in_process", [False, True])
def test_a_thread_safe_grader_grades_groups_at_once(in_process: bool) -> None:
    # Four calls meet at a barrier: only possible when they run concurrently (in worker processes, or on threads).
    barrier = (threading.Barrier if in_process else multiprocessing.get_context("fork").Barrier)(4)

    def grader(group):
        barrier.wait(timeout=20)
        return by_order(group)

    grader.thread_safe = True
    grader.in_process = in_process
    gar = wai.GroupwiseGrading(grader=grader, concurrency=4)
    groups = gar.grade_batch([1, 1, 0, 0] * 4, ["p"] * 16, ["a"] * 16, group_size=4)
    assert all(g.reason is None for g in groups)


def test_time_limit_and_concurrency_are_checked() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        wai.GroupwiseGrading(grader=by_order, timeout_s=0)
    with pytest.raises(ValueError, match="concurrency"):
        wai.GroupwiseGrading(grader=by_order, concurrency=0)
    assert wai.GroupwiseGrading(grader=by_order, timeout_s=None).timeout_s is None


# ---------------------------------------------------------------- the batches TRL sends


class FakeTrainer:
    """What TRL's bound ``log_metric`` leads to: the trainer, its model's training flag and its group sizes."""

    def __init__(self, training: bool, num_generations: int, num_generations_eval: int) -> None:
        self.model = SimpleNamespace(training=training)
        self.num_generations = num_generations
        self.num_generations_eval = num_generations_eval
        self.metrics: dict[str, list[float]] = {}

    def _log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(value)


def test_an_empty_batch_is_an_empty_answer() -> None:
    gar = wai.GroupwiseGrading(grader=by_order)
    trainer = FakeTrainer(True, 4, 4)
    assert gar.trl_reward(lambda **kw: [], num_generations=4)(prompts=[], completions=[]) == []
    assert gar.trl_reward(lambda **kw: [], 4)(prompts=[], completions=[], log_metric=trainer._log_metric) == []


def test_an_evaluation_batch_is_grouped_by_num_generations_eval() -> None:
    # TRL's own case: G = 3 in training, an evaluation batch of 4 with num_generations_eval = 2.
    gar = wai.GroupwiseGrading(grader=by_order)
    seen = []
    reward = gar.trl_reward(lambda **kw: [1.0, 0.0, 1.0, 1.0], num_generations=3, on_graded=lambda g, s: seen.extend(g))
    trainer = FakeTrainer(False, 3, 2)
    out = reward(prompts=["p", "p", "q", "q"], completions=list("abcd"), log_metric=trainer._log_metric)
    assert out == [1.0, 0.0, 1.0, 1.0] and [g.phase for g in seen] == ["eval", "eval"]
    assert [len(g.rewards) for g in seen] == [2, 2] and gar.stats.grader_calls == 1
    assert trainer.metrics["groupwise/groups"] == [2.0]


def test_num_generations_eval_1_grades_no_prompt_with_another() -> None:
    calls = []
    gar = wai.GroupwiseGrading(grader=lambda group: calls.append(group) or by_order(group))
    reward = gar.trl_reward(lambda **kw: [1.0, 0.0, 1.0], num_generations=3)
    out = reward(prompts=["p", "q", "r"], completions=list("abc"), log_metric=FakeTrainer(False, 3, 1)._log_metric)
    assert out == [1.0, 0.0, 1.0] and calls == []  # three groups of one: nothing to tell apart
    with pytest.raises(ValueError, match="num_generations_eval=2"):
        reward(prompts=["p"] * 3, completions=list("abc"), log_metric=FakeTrainer(False, 3, 2)._log_metric)


def test_a_group_of_one_is_left_as_it_is() -> None:
    gar = wai.GroupwiseGrading(grader=by_order)
    assert gar.trl_reward(lambda **kw: [1.0, 0.0], num_generations=1)(prompts=["p", "q"], completions=["a", "b"]) == [
        1.0,
        0.0,
    ]
    assert gar.stats.grader_calls == 0


def test_the_binary_arm_also_makes_a_non_finite_reward_unscorable() -> None:
    from whileai.training.run import binary_reward

    trainer = FakeTrainer(True, 4, 4)
    reward = binary_reward(lambda **kw: [math.inf, 1.0, 0.0, None], num_generations=4)
    out = reward(prompts=["p"] * 4, completions=list("abcd"), log_metric=trainer._log_metric)
    assert math.isnan(out[0]) and out[1:3] == [1.0, 0.0] and math.isnan(out[3])
    assert trl_advantages(out, 4) == pytest.approx([0.0, 0.5, -0.5, 0.0])
    assert trainer.metrics["whileai/unscorable"] == [2.0]


def test_a_grading_object_that_goes_away_takes_its_worker_threads_with_it() -> None:
    import gc

    def thread_safe(group):
        return by_order(group)

    thread_safe.thread_safe = True
    before = threading.active_count()
    for _ in range(10):
        gar = wai.GroupwiseGrading(grader=thread_safe, concurrency=4)
        gar.grade_batch([1, 1, 0, 0] * 8, ["p"] * 32, ["a"] * 32, group_size=4)
        del gar
    gc.collect()
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


# ---------------------------------------------------------------- a grader that exits


@pytest.mark.parametrize("timeout_s", [None, 5.0])
@pytest.mark.parametrize("mode", ["advantage", "reward"])
def test_a_grader_s_system_exit_is_its_group_s_fallback(timeout_s, mode) -> None:
    def leaves(*args):
        raise SystemExit(3)

    gar = wai.GroupwiseGrading(grader=leaves, mode=mode, timeout_s=timeout_s)
    assert gar.shape([1, 1, 0, 0], ["p"] * 4, list("abcd"), group_size=4) == [1.0, 1.0, 0.0, 0.0]
    assert gar.stats.fallbacks == {"SystemExit": 1}
    report = gar.check_spread(
        [{"scenario_id": "s", "reward": 1, "final_text": t} for t in "ab"], strict=False
    )  # fmt: skip
    assert report.verdict == "broken" and report.failed == {"SystemExit": 1}


def test_ctrl_c_while_a_grader_runs_still_stops_the_run() -> None:
    def interrupted(group):
        raise KeyboardInterrupt

    interrupted.in_process = True  # a grader in this process: Ctrl-C lands inside it
    for timeout_s in (None, 5.0):
        with pytest.raises(KeyboardInterrupt):
            wai.GroupwiseGrading(grader=interrupted, timeout_s=timeout_s).shape([1, 0], ["p"] * 2, "ab", group_size=2)

    # A grader in its worker: Ctrl-C reaches this process while it waits, and the worker goes with it.
    def sleeps(group):
        time.sleep(30)

    gar = wai.GroupwiseGrading(grader=sleeps, timeout_s=60)
    threading.Timer(1.0, signal.raise_signal, (signal.SIGINT,)).start()
    with pytest.raises(KeyboardInterrupt):
        gar.shape([1, 1, 0], ["p"] * 3, "abc", group_size=3)
    assert all(worker.pid is None for worker in gar._calls._workers)


def test_a_grader_that_raises_keyboard_interrupt_itself_in_its_worker_is_a_counted_failure() -> None:
    def raises(group):
        raise KeyboardInterrupt

    gar = wai.GroupwiseGrading(grader=raises)
    (group,) = gar.grade_batch([1, 1, 0], ["p"] * 3, "abc", 3)
    assert group.failure == "KeyboardInterrupt" and gar.stats.failed == 1
