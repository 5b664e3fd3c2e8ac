"""The collector that turns one-at-a-time reward calls (verl's reward loop) into whole groups: each group graded once,
every waiting call answered with its share, and every way a group can go wrong ending in an answer, counted."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import pytest

from whileai import GroupwiseGrading
from whileai.grading.group import GradedGroup
from whileai.integrations.collector import GroupCollector, Response, Shaped, trainer_values
from whileai.methods import redistribute


def by_length(group: list[dict[str, Any]]) -> dict[str, Any]:
    """Shorter passes first; a pass that says HACK is a hack."""
    passes = [g for g in group if g["passed"] and "HACK" not in g["completion"]]
    ranking = [g["index"] for g in sorted(passes, key=lambda g: len(g["completion"]))]
    return {"ranking": ranking, "hacks": [g["index"] for g in group if g["passed"] and "HACK" in g["completion"]]}


class Counting:
    """A batch grader (``grade_groups``) that records each batch it is given."""

    def __init__(self, grade: Any = by_length) -> None:
        self.batches: list[int] = []
        self.grade = grade

    def __call__(self, group: list[dict[str, Any]]) -> Any:
        return self.grade(group)

    def grade_groups(self, groups: list[list[dict[str, Any]]]) -> list[Any]:
        self.batches.append(len(groups))
        return [self.grade(g) for g in groups]


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


GROUP = [(1.0, "ab"), (1.0, "abcdef"), (0.0, "x"), (1.0, "abcd")]


async def send(
    collector: GroupCollector, key: str, members: list[tuple[float, str]], delay: float = 0.0
) -> list[Shaped]:
    async def one(reward: float, text: str, position: int) -> Shaped:
        await asyncio.sleep(delay * position)
        return await collector.reward(key, Response(reward, f"prompt {key}", text))

    return list(await asyncio.gather(*(one(r, t, i) for i, (r, t) in enumerate(members))))


def test_a_full_group_is_graded_once_and_each_call_gets_equation_3() -> None:
    grader = Counting()
    grading = GroupwiseGrading(grader)
    logged: list[GradedGroup] = []
    collector = GroupCollector(grading, 4, on_graded=logged.extend)
    answers = run(send(collector, "u", GROUP, delay=0.001))
    collector.close()
    assert grader.batches == [1] and len(logged) == 1
    record = logged[0]
    assert record.label == "u" and record.graded and record.reason is None
    values = [a.value for a in answers]
    # Mean subtraction (the trainer's) gives A' of equation 3, from the grader's own factors.
    mean = sum(values) / 4
    expected = redistribute([r for r, _ in GROUP], {i: f for i, f in record.factors.items()})
    assert [v - mean for v in values] == pytest.approx(expected, abs=1e-12)
    assert values[0] > values[3] > values[1] > 0 == values[2]  # shortest pass best
    assert [a.member for a in answers] == [0, 1, 2, 3] and {a.fallback for a in answers} == {""}


def test_groups_that_fill_together_are_graded_in_one_batch() -> None:
    """Eight groups whose responses interleave: one grader call per group, in fewer batches than groups."""
    grader = Counting()
    collector = GroupCollector(GroupwiseGrading(grader), 4)

    async def all_groups() -> list[list[Shaped]]:
        return await asyncio.gather(*(send(collector, f"u{k}", GROUP) for k in range(8)))

    answers = run(all_groups())
    collector.close()
    assert sum(grader.batches) == 8 and len(grader.batches) < 8
    assert all(a[0].value == answers[0][0].value for a in answers)  # the same group, the same answer


def test_random_arrival_order_is_answered_by_group_and_member() -> None:
    """Sixty responses of fifteen groups in a shuffled order: each answer belongs to its own group and place."""
    grader = Counting()
    logged: list[GradedGroup] = []
    collector = GroupCollector(GroupwiseGrading(grader), 4, on_graded=logged.extend)
    items = [(f"u{k}", reward, text + "y" * k) for k in range(15) for reward, text in GROUP]
    random.Random(3).shuffle(items)

    async def go() -> list[Shaped]:
        return await asyncio.gather(*(collector.reward(k, Response(r, k, t)) for k, r, t in items))

    answers = run(go())
    collector.close()
    records = {g.label: g for g in logged}
    assert len(records) == 15
    for (key, reward, _), answer in zip(items, answers, strict=True):
        assert answer.group == key
        assert records[key].rewards[answer.member] == reward
        assert records[key].shaped[answer.member] == pytest.approx(answer.value)


def test_a_group_that_never_fills_gets_its_verifier_rewards_after_the_wait() -> None:
    grading = GroupwiseGrading(Counting())
    logged: list[GradedGroup] = []
    collector = GroupCollector(grading, 4, wait_s=0.2, on_graded=logged.extend)

    async def go() -> tuple[list[Shaped], Shaped]:
        three = await send(collector, "short", GROUP[:3])
        late = await collector.reward("short", Response(1.0, "p", "late"))
        for _ in range(1000):  # the log is written on the grading thread
            if logged:
                break
            await asyncio.sleep(0.01)
        return three, late

    three, late = run(go())
    collector.close()
    assert [a.value for a in three] == [1.0, 1.0, 0.0]
    assert {a.fallback for a in three} == {"group incomplete"}
    assert late == Shaped(1.0, "short", -1, "late response") and collector.late.count == 1
    assert grading.stats.failed == 1 and grading.stats.fallbacks == {"group incomplete": 1}
    assert logged[0].reason == "group incomplete: 3 of 4 responses within 0.2 s"


def test_a_uid_used_again_after_its_group_was_answered_whole_is_counted_and_named() -> None:
    """verl v0's validation keeps a dataset's own uid column, so a later validation sends the same uids again:
    those responses keep their verifier rewards, counted apart from late ones, and the uid is said."""
    said: list[str] = []
    collector = GroupCollector(GroupwiseGrading(Counting()), 4, say=said.append)

    async def go() -> tuple[list[Shaped], list[Shaped]]:
        return await send(collector, "row-7", GROUP), await send(collector, "row-7", GROUP)

    first, again = run(go())
    collector.close()
    assert {a.fallback for a in first} == {""}
    assert [a.value for a in again] == [r for r, _ in GROUP] and {a.fallback for a in again} == {"repeated uid"}
    assert collector.repeated.count == 4 and collector.late.count == 0
    assert collector.figures()["repeated_uid_responses"] == 4
    assert len(said) == 1 and "'row-7'" in said[0] and "'uid' column" in said[0]


def test_a_group_with_a_response_answered_elsewhere_fills_and_falls_back_at_once() -> None:
    """A response a reward worker answered itself when the groups actor was lost is sent to the new actor marked
    answered: its group fills there and keeps its verifier rewards, instead of waiting out wait_s."""
    grading = GroupwiseGrading(Counting())
    collector = GroupCollector(grading, 4, wait_s=600)

    async def go() -> list[Shaped]:
        answered = collector.reward("g", Response(1.0, "p", "ab", answered=True))
        return await asyncio.gather(answered, *(collector.reward("g", Response(r, "p", t)) for r, t in GROUP[1:]))

    shaped = run(go())
    collector.close()
    assert [a.value for a in shaped] == [r for r, _ in GROUP] and {a.fallback for a in shaped} == {"groups actor lost"}
    assert grading.stats.fallbacks == {"groups actor lost": 1}


def test_a_grader_that_raises_makes_its_group_fall_back() -> None:
    def broken(group: list[dict[str, Any]]) -> Any:
        raise ZeroDivisionError("no")

    grading = GroupwiseGrading(broken)
    collector = GroupCollector(grading, 4)
    answers = run(send(collector, "u", GROUP))
    collector.close()
    assert [a.value for a in answers] == [r for r, _ in GROUP]
    assert {a.fallback for a in answers} == {"ZeroDivisionError"}
    assert grading.stats.fallbacks == {"ZeroDivisionError": 1}


def test_a_grading_call_that_raises_answers_every_group_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    grading = GroupwiseGrading(Counting())

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError("out of memory")

    monkeypatch.setattr(grading, "grade_batch", explode)
    collector = GroupCollector(grading, 4)
    answers = run(send(collector, "u", [(1.0, "a"), (math.nan, "b"), (0.0, "c"), (1.0, "d")]))
    collector.close()
    assert [a.value for a in answers] == pytest.approx([1.0, 2 / 3, 0.0, 1.0])
    assert {a.fallback for a in answers} == {"MemoryError"}
    assert grading.stats.failed == 1 and grading.stats.unscorable == 1


def test_an_unscorable_member_gets_its_group_s_mean_so_its_advantage_is_zero() -> None:
    grading = GroupwiseGrading(Counting())
    collector = GroupCollector(grading, 4)
    members = [(1.0, "ab"), (math.nan, "zz"), (0.0, "x"), (1.0, "abcd")]
    answers = run(send(collector, "u", members))
    collector.close()
    values = [a.value for a in answers]
    assert all(math.isfinite(v) for v in values)
    mean = sum(values) / 4
    assert values[1] - mean == pytest.approx(0.0, abs=1e-12)
    # The scorable three form equation 3 alone.
    kept = [values[0] - mean, values[2] - mean, values[3] - mean]
    assert sum(kept) == pytest.approx(0.0, abs=1e-12) and kept[0] > kept[2] > 0 > kept[1]


def test_a_hack_trains_as_a_failure() -> None:
    collector = GroupCollector(GroupwiseGrading(Counting()), 4)
    answers = run(send(collector, "u", [(1.0, "ab"), (1.0, "HACK"), (0.0, "x"), (1.0, "abcd")]))
    collector.close()
    values = [a.value for a in answers]
    assert values[1] == values[2] == 0.0


def test_a_log_that_fails_is_said_and_the_answers_still_come() -> None:
    said: list[str] = []

    def full_disk(groups: list[GradedGroup]) -> None:
        raise OSError(28, "No space left on device")

    collector = GroupCollector(GroupwiseGrading(Counting()), 4, on_graded=full_disk, say=said.append)
    answers = run(send(collector, "u", GROUP))
    collector.close()
    assert len(answers) == 4 and all(a.fallback == "" for a in answers)
    assert said and "could not log 1 graded group" in said[0] and "No space left" in said[0]


def test_a_new_event_loop_starts_afresh() -> None:
    """A reward worker's loop replaced (a restarted actor): the next loop gets its own grading task."""
    collector = GroupCollector(GroupwiseGrading(Counting()), 2)
    first = run(send(collector, "a", GROUP[:2]))
    second = run(send(collector, "b", GROUP[:2]))
    collector.close()
    assert [a.group for a in first + second] == ["a", "a", "b", "b"]


def test_trainer_values() -> None:
    assert trainer_values([math.nan, math.nan]) == [0.0, 0.0]
    assert trainer_values([2.0, math.inf, 0.0]) == [2.0, 1.0, 0.0]


@pytest.mark.parametrize(("size", "wait"), [(0, 1.0), (True, 1.0), (2.5, 1.0), (4, 0), (4, -1.0), (4, True)])
def test_bad_arguments_are_named(size: Any, wait: Any) -> None:
    with pytest.raises(ValueError, match=r"group_size|wait_s"):
        GroupCollector(GroupwiseGrading(Counting()), size, wait_s=wait)


def test_close_answers_every_waiting_call_and_every_later_one() -> None:
    collector = GroupCollector(GroupwiseGrading(Counting()), 4)

    async def go() -> tuple[list[Shaped], Shaped]:
        waiting = [asyncio.ensure_future(collector.reward("u", Response(r, "p", t))) for r, t in GROUP[:3]]
        await asyncio.sleep(0.01)
        collector.close()
        answered = list(await asyncio.gather(*waiting))
        return answered, await collector.reward("u", Response(1.0, "p", "after"))

    answered, after = run(go())
    assert [a.value for a in answered] == [1.0, 1.0, 0.0] and {a.fallback for a in answered} == {"closed"}
    assert after.fallback == "closed" and after.value == 1.0


def test_a_record_that_cannot_be_answered_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure past the grading call (here: reading the graded records) leaves no call waiting; the next groups
    are graded as usual."""
    said: list[str] = []
    collector = GroupCollector(GroupwiseGrading(Counting()), 4, say=said.append)
    answer = collector._answer

    def broken(group: Any, record: Any, fallback: str) -> None:
        raise KeyError("a field")

    monkeypatch.setattr(collector, "_answer", broken)
    first = run(send(collector, "u", GROUP))
    monkeypatch.setattr(collector, "_answer", answer)
    second = run(send(collector, "v", GROUP))
    collector.close()
    assert [a.value for a in first] == [r for r, _ in GROUP] and {a.fallback for a in first} == {"KeyError"}
    assert said and "kept its verifier rewards" in said[0]
    assert {a.fallback for a in second} == {""} and second[0].value > 1.0
