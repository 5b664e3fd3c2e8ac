"""The reward function's path gives what the general functions give: equation 3, renderings, labels, counters; and the
work left out (rendering groups the grader is not sent, a wake-up per grader call) stays out.

The renderer's plain path is taken for the plain types TRL hands over (``dict``, ``list``); the same values wrapped in
read-only mappings or tuples go the general way, so comparing the two checks the plain one."""

from __future__ import annotations

import math
import os
import threading
import time
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai as wai
from whileai.grading import group as group_module
from whileai.grading.calls import GraderCalls
from whileai.grading.tally import GradingStats
from whileai.grading.trl import group_labels
from whileai.methods import redistribute_result
from whileai.rows.text import completion_text, prompt_text, render_messages

# ---------------------------------------------------------------- equation 3 through the object


@settings(max_examples=200, deadline=None)
@given(
    rewards=st.lists(st.sampled_from([0.0, 1.0, 0.5, 0.2, 1, 0.3]), min_size=2, max_size=8),
    data=st.data(),
    cap=st.sampled_from([1.0, 1.5, 3.0]),
    hack_zero=st.booleans(),
)
def test_the_graded_advantages_are_redistribute_results(rewards, data, cap, hack_zero) -> None:
    passes = [i for i, r in enumerate(rewards) if r > 0]
    ranking = data.draw(st.permutations(passes))
    hacks = data.draw(st.lists(st.sampled_from(passes), max_size=1, unique=True)) if passes else []

    def grader(group):
        return {"ranking": list(ranking), "hacks": hacks}

    grader.in_process = True  # the property is equation 3 through the object, over 200 examples: no worker each
    gar = wai.GroupwiseGrading(grader=grader, cap=cap, hack_zero=hack_zero)
    group = gar.grade_group(rewards, ["p"] * len(rewards), ["c"] * len(rewards))
    if not group.graded:
        return  # nothing to send (no pass)
    kept = [i for i in passes if not (hack_zero and i in hacks)]
    expected = redistribute_result(group.effective_rewards, group.factors, passed=kept, cap=cap)
    assert group.redistributed == expected.advantages and group.lam == expected.lam
    assert group.capped == expected.capped


# ---------------------------------------------------------------- rendering


text = st.text(alphabet="ab<>&é \n", max_size=6)
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["b", "a", "order_id"]), st.one_of(text, st.integers(), st.floats())),
    text,
    st.none(),
)
call = st.fixed_dictionaries({"function": st.fixed_dictionaries({"name": text, "arguments": arguments})})
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", "user", "tool", "system", "other"])},
    optional={"content": st.one_of(text, st.none(), st.integers()), "tool_calls": st.lists(call, max_size=2)},
)


def _general(messages: list[dict]) -> list:
    """The same conversation with its messages, tool calls and functions in read-only mappings, which the general path
    reads (the arguments stay as they are: a mapping there is written as JSON either way)."""

    def wrap(value):
        if isinstance(value, dict):
            return MappingProxyType({k: v if k == "arguments" else wrap(v) for k, v in value.items()})
        if isinstance(value, list):
            return [wrap(v) for v in value]
        return value

    return [wrap(m) for m in messages]


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(message, max_size=5))
def test_plain_messages_render_as_the_general_path_renders_them(messages) -> None:
    assert completion_text(messages) == render_messages(_general(messages))
    assert prompt_text(messages) == prompt_text(tuple(messages))


def test_only_the_groups_sent_to_the_grader_are_rendered(monkeypatch) -> None:
    rendered = []

    def counting(completion):
        rendered.append(completion)
        return completion_text(completion)

    monkeypatch.setattr(group_module, "completion_text", counting)
    gar = wai.GroupwiseGrading(grader=lambda group: {"ranking": [g["index"] for g in group if g["passed"]]})
    reward = gar.trl_reward(lambda **kw: [1.0, 0.0, 1.0, 1.0, 0.0, 0.0], num_generations=2)
    conversations = [[{"role": "assistant", "content": f"answer {i}"}] for i in range(6)]
    out = reward(prompts=[[{"role": "user", "content": "p"}]] * 6, completions=conversations)
    assert out == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert rendered == conversations[:2]  # the mixed group only; all-pass and all-fail groups are not read


# ---------------------------------------------------------------- labels and counters


@settings(max_examples=300, deadline=None)
@given(
    offset=st.integers(min_value=0, max_value=40),
    count=st.integers(min_value=0, max_value=40),
    size=st.integers(min_value=1, max_value=9),
)
def test_group_labels_name_each_completion_s_group(offset, count, size) -> None:
    assert group_labels("3.1", offset, count, size) == [f"3.1:{(offset + i) // size}" for i in range(count)]


def test_a_batch_is_counted_group_by_group() -> None:
    gar = wai.GroupwiseGrading(grader=lambda group: {"ranking": [g["index"] for g in group if g["passed"]]})
    gar.grade_batch([1, 0, 1, 1, math.nan, 1, 1, 1, 0, 0], ["p"] * 10, ["a"] * 10, group_size=2)
    figures = gar.stats.as_dict()
    # five groups: [1, 0] graded; [1, 1] all passes; [NaN, 1] one scorable pass; [1, 1]; [0, 0]
    assert (figures["groups"], figures["mixed"], figures["grader_calls"], figures["failed"]) == (5, 1, 1, 0)
    assert figures["unscorable"] == 1 and figures["scores"] == 0  # a single pass gives no score


# ---------------------------------------------------------------- grader calls on worker threads


def test_each_call_has_its_own_limit_not_the_batch() -> None:
    # Five calls of 0.2 s in a row on one worker: the batch takes 1 s, each call is within its 0.6 s limit.
    calls = GraderCalls(timeout_s=0.6, concurrency=1)
    start = time.monotonic()
    answers = calls.run(lambda x: time.sleep(0.2) or x, list(range(5)))
    assert answers == [0, 1, 2, 3, 4] and calls.timeouts == 0
    assert time.monotonic() - start >= 1.0
    calls.close()


def test_a_batch_of_quick_calls_runs_on_one_worker_back_to_back() -> None:
    def call(x):
        return x * 2, os.getpid()

    calls = GraderCalls(timeout_s=5.0, concurrency=1)
    answers = calls.run(call, list(range(200)))
    assert [a for a, _ in answers] == [2 * x for x in range(200)]
    assert len({pid for _, pid in answers}) == 1 and answers[0][1] != os.getpid()  # one worker process, not this one
    calls.close()
    threads = set()

    def in_process(x):
        threads.add(threading.current_thread().name)
        return x * 2

    calls = GraderCalls(timeout_s=5.0, concurrency=1, in_process=True)  # a grader that keeps to this process
    assert calls.run(in_process, list(range(200))) == [2 * x for x in range(200)]
    assert threads == {"whileai-grader"}
    calls.close()


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_call_over_its_limit_stands_in_as_a_timeout_and_the_others_keep_their_answers(concurrency) -> None:
    release = threading.Event()

    def call(x):
        if x == "hang":
            release.wait(20)
        return x

    calls = GraderCalls(timeout_s=0.3, concurrency=concurrency)
    answers = calls.run(call, ["a", "hang", "b"])
    release.set()
    assert answers[0] == "a" and type(answers[1]).__name__ == "GraderTimeout"
    assert answers[2] == "b"  # a fresh worker takes the call after the stuck one, one worker or several
    calls.close()


def test_counting_a_batch_adds_the_scores_as_one_by_one() -> None:
    from whileai.grading.groupwise import GradedGroup

    groups = []
    for g in range(40):
        rewards = [float((g + i) % 3 > 0) for i in range(6)]
        group = GradedGroup(f"t{g}", rewards, [r > 0 for r in rewards], rewards[:], rewards[:])
        group.scores = [1.0 - 0.137 * ((g * i) % 5) for i in range(g % 4)]
        if g % 7 == 0:
            group.fail("unusable answer", "unusable answer: no ranking")
        groups.append(group)
    batch, single = GradingStats(), GradingStats()
    for group in groups:
        group.grader_calls = 1
    batch.record_groups(groups, hack_zero=True)
    for group in groups:
        single.record_groups([group], hack_zero=True)
    assert batch.as_dict() == single.as_dict()
    assert (batch.scores.count, batch.scores.mean, batch.scores._m2) == (
        single.scores.count,
        single.scores.mean,
        single.scores._m2,
    )
