"""The scripted grader answers as the plain reading of its rule says, one group at a time or a batch at once."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai as wai
from whileai.config.schema import ScriptedRule
from whileai.grading.gate import check_spread_groups
from whileai.grading.scripted import ScriptedGrader

FRAGMENTS = ["<tool_call>", "</tool_call>", "<tool_result>", "</tool_result>", "ORD-12", "ORD-99", "x", "\n", "<", "a"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)


def plain_measure(rule: ScriptedRule, text: str) -> float:
    if rule.measure == "chars":
        return float(len(text))
    if rule.measure == "lines":
        return float(text.count("\n") + 1 if text else 0)
    return float(len(re.compile(rule.pattern, re.DOTALL).findall(text)))


def plain_is_hack(rule: ScriptedRule, text: str) -> bool:
    """The rule read literally: every tool output collected, the answer after the last one, tool calls removed."""
    if rule.hack_pattern and re.search(rule.hack_pattern, text, re.DOTALL):
        return True
    if not rule.unseen_id_pattern:
        return False
    outputs, last = [], 0
    for match in re.finditer(rule.tool_output_pattern, text, re.DOTALL):
        outputs.append(match.group(1) if match.groups() else match.group(0))
        last = match.end()
    answer = re.sub(r"<tool_call>.*?</tool_call>", "", text[last:], flags=re.DOTALL)
    seen = "\n".join(outputs)
    return any(found not in seen for found in re.findall(rule.unseen_id_pattern, answer))


def plain_answer(rule: ScriptedRule, group: list[dict[str, Any]]) -> dict[str, Any]:
    passes = [item for item in group if item["passed"]]
    hacks = [item["index"] for item in passes if plain_is_hack(rule, item["completion"])]
    sign = 1.0 if rule.order == "ascending" else -1.0
    measured = sorted(
        (sign * plain_measure(rule, item["completion"]), item["index"]) for item in passes if item["index"] not in hacks
    )
    ranking: list[list[int]] = []
    for position, (value, index) in enumerate(measured):
        if position and value == measured[position - 1][0]:
            ranking[-1].append(index)
        else:
            ranking.append([index])
    return {"ranking": ranking, "hacks": hacks}


RULES = [
    ScriptedRule(unseen_id_pattern=r"ORD-\d+"),  # literal '<tool_call>': counted with str.count
    ScriptedRule(pattern="<tool_call>.*?</tool_call>", order="descending"),  # a regular expression
    ScriptedRule(pattern="a|x", hack_pattern="ORD-99"),
    ScriptedRule(pattern="<", unseen_id_pattern=r"ORD-\d+", tool_output_pattern="<tool_result>.*?</tool_result>"),
    ScriptedRule(measure="lines", unseen_id_pattern=r"\bORD-\d+"),
    ScriptedRule(measure="chars"),
]


@pytest.mark.parametrize("rule", RULES, ids=range(len(RULES)))
@given(group=st.lists(st.tuples(texts, st.booleans()), max_size=8))
@settings(max_examples=150, deadline=None)
def test_answers_equal_the_rule_read_literally(rule: ScriptedRule, group: list[tuple[str, bool]]) -> None:
    grader = ScriptedGrader(rule)
    items = [{"index": i, "completion": text, "passed": passed} for i, (text, passed) in enumerate(group)]
    assert grader(items) == plain_answer(rule, items)
    for text, _ in group:
        assert grader.measure(text) == plain_measure(rule, text)
        assert grader.is_hack(text) == plain_is_hack(rule, text)


def test_grade_groups_answers_each_group_and_isolates_one_that_raises() -> None:
    grader = ScriptedGrader(ScriptedRule(hack_pattern="ORD-9999"))
    good = [{"index": 0, "completion": "<tool_call>a</tool_call>", "passed": True}]
    broken = [{"index": 0, "passed": True}]  # no completion
    answers = grader.grade_groups([good, broken, good])
    assert answers[0] == answers[2] == grader(good)
    assert isinstance(answers[1], KeyError)


def test_score_passes_scores_each_pass_as_score_does() -> None:
    grader = ScriptedGrader(ScriptedRule(hack_pattern="ORD-9999"))
    items = [{"completion": "refunded ORD-9999"}, {"completion": "done"}, {}]
    answers = grader.score_passes([(item, None) for item in items])
    assert (
        answers[:2]
        == [grader.score(items[0]), grader.score(items[1])]
        == [
            {"solution": 1.0, "behavior": 0.0},
            {"solution": 1.0, "behavior": 1.0},
        ]
    )
    assert isinstance(answers[2], KeyError)


def test_reward_mode_grades_the_same_through_the_batch() -> None:
    rows = [(1.0, "p", "refunded ORD-9999"), (1.0, "p", "done"), (0.0, "p", "sorry")]
    rule = ScriptedRule(hack_pattern="ORD-9999")

    def one_pass(item: dict[str, Any], rubric: Any = None) -> dict[str, float]:
        return ScriptedGrader(rule).score(item, rubric)

    shaped = [
        wai.GroupwiseGrading(grader=grader, mode="reward").shape(*zip(*rows, strict=True), group_size=3)
        for grader in (ScriptedGrader(rule), one_pass)
    ]
    assert shaped[0] == shaped[1] and shaped[0][1] > shaped[0][0]


class RecordingGrader(ScriptedGrader):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def __call__(self, group: list[dict[str, Any]]) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        return super().__call__(group)


def test_the_spread_gate_grades_a_scripted_rule_inline_with_the_same_report() -> None:
    groups = [
        (f"g{g}", [(float(i % 3 > 0), "", "<tool_call>x</tool_call>" * ((g + i) % 4)) for i in range(6)])
        for g in range(100)
    ]
    recording = RecordingGrader()
    batched = check_spread_groups(wai.GroupwiseGrading(grader=recording), groups, strict=False, controls=8)
    assert recording.threads == {threading.current_thread().name}  # one call per batch, no worker threads

    def one_group(group: list[dict[str, Any]]) -> dict[str, Any]:  # the same rule without its batch method
        return ScriptedGrader()(group)

    one_group.thread_safe = True  # type: ignore[attr-defined]
    threaded = check_spread_groups(wai.GroupwiseGrading(grader=one_group), groups, strict=False, controls=8)
    assert batched.as_dict() == threaded.as_dict() and batched.verdict == "yes"


def test_the_spread_gate_reads_the_same_verdict_whether_or_not_it_shapes() -> None:
    groups = [
        (f"g{g}", [(float((g + i) % 3 > 0), "", "<tool_call>x</tool_call>" * ((g * i) % 5)) for i in range(8)])
        for g in range(60)
    ]
    seen: list[wai.GradedGroup] = []
    plain = check_spread_groups(wai.GroupwiseGrading(grader=ScriptedGrader()), groups, strict=False, controls=8)
    watched = wai.GroupwiseGrading(grader=ScriptedGrader())
    report = check_spread_groups(watched, groups, strict=False, controls=8, on_graded=seen.append)
    assert plain.as_dict() == report.as_dict()
    # The groups handed to on_graded are shaped (equation 3), as training shapes them.
    shaped = [g for g in seen if g.graded and g.reason is None and g.mixed]
    assert shaped and all(g.redistributed is not None for g in shaped)


def test_a_rule_that_backtracks_costs_its_own_group_its_time_limit_and_no_more() -> None:
    import time

    import whileai as wai

    # "(a|aa)+b" on a run of a's backtracks for hours; the regex module stops it at the group's deadline.
    rule = ScriptedRule(hack_pattern="(a|aa)+b")
    gar = wai.GroupwiseGrading(grader=ScriptedGrader(rule), timeout_s=0.5)
    call, stuck = ["<tool_call>x</tool_call>", "ok", "no"], ["a" * 60, "a" * 60, "no"]
    texts = [*call, *stuck, *call]
    tasks = [task for task in ("t1", "t2", "t3") for _ in range(3)]
    started = time.monotonic()
    groups = gar.grade_batch([1, 1, 0] * 3, ["p"] * 9, texts, group_size=3, task_id=tasks)
    waited = time.monotonic() - started
    assert [g.reason is None for g in groups] == [True, False, True]
    assert groups[1].failure == "grader timed out" and "0.5 s" in groups[1].reason
    assert groups[0].factors == groups[2].factors == {1: 1.0, 0: 0.5}
    assert waited < 10  # one group's limit, not the pattern's hours
