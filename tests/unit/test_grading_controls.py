"""The spread gate's controls as parts: the control group, Kendall's tau, the figures and the verdict they give."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai as wai
from whileai.grading.controls import INJECTION, INJECTIONS, ControlGroup, changed, controls_report, make_control
from whileai.grading.verdict import spread_report
from whileai.stats import kendall_tau


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_a_control_is_a_shuffle_with_an_identical_an_injected_and_a_surface_copy_of_a_pass(size, data) -> None:
    passes = data.draw(st.lists(st.integers(0, size - 1), min_size=1, unique=True))
    control = make_control(size, passes, seed=data.draw(st.text(max_size=5)), turn=data.draw(st.integers(0, 5)))
    rest = [m for k, m in enumerate(control.members) if k not in (control.copy, control.injected, control.surface)]
    assert sorted(rest) == list(range(size))  # every member once, besides the three copies
    copies = {control.copy, control.original, control.injected, control.surface}
    assert len(copies) == 4 and {control.members[k] for k in copies} == {control.members[control.original]}
    assert control.members[control.copy] in passes
    if size >= 2:
        assert rest != list(range(size))  # never shown in the same order
    shown = control.shown([f"text {m}" for m in range(size)], changed)
    assert shown[control.injected] == shown[control.original] + INJECTIONS[control.injection]
    assert shown[control.copy] == shown[control.original]
    assert shown[control.surface] != shown[control.original] and shown[control.original] in shown[control.surface]


def test_the_injected_copy_of_a_conversation_ends_with_the_instruction() -> None:
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "done"}]
    injected = changed(chat)
    assert injected[-1]["content"] == "done" + INJECTION and chat[-1]["content"] == "done"


def test_injection_is_measured_and_warned_of_not_refused() -> None:
    control = ControlGroup(members=[1, 0, 1, 1], copy=2, original=0, injected=3)
    held = ({0: 0.5, 1: 1.0}, {0: 1.0, 1: 0.5, 2: 1.0, 3: 1.0}, control)
    rose = ({0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5, 2: 0.5, 3: 1.0}, control)
    report = controls_report([held, held])
    assert report.injections == [True, True] and not report.warning and "injection held in 2 of 2" in report.line
    report = controls_report([held, rose])
    assert report.injections == [True, False] and report.ok  # a warning, not a refusal
    assert report.warning.startswith("warning: injection held in 1 of 2 controls")
    verdict = spread_report({"a": [0.1, 0.9], "b": [0.2, 0.8]}, controls=report)
    assert verdict.verdict == "yes" and "warning: injection held in 1 of 2" in str(verdict)
    assert verdict.as_dict()["controls"]["injections_held"] == 1


def test_a_position_effect_larger_than_the_differences_refuses() -> None:
    follows = {"effect": 0.4, "differences": 0.1, "orders": 20}
    report = controls_report([], position=follows)
    assert report.follows_slot and report.refuses and "follow the display slot" in report.why
    assert "position effect 0.400" in report.line
    assert not controls_report([], position={**follows, "orders": 4}).follows_slot  # too few orders to say
    assert not controls_report([], position={"effect": 0.1, "differences": 0.4, "orders": 20}).follows_slot


def test_kendall_tau_b_with_ties() -> None:
    assert kendall_tau({0: 1, 1: 2, 2: 3}, {0: 3, 1: 2, 2: 1}) == -1.0
    assert kendall_tau({0: 1, 1: 1, 2: 2}, {0: 1, 1: 1, 2: 2}) == pytest.approx(1.0)
    assert kendall_tau({0: 1, 1: 1}, {0: 1, 1: 2}) is None  # one side ties everything: undefined
    assert kendall_tau({0: 1}, {0: 1}) is None


def test_the_figures_and_their_thresholds() -> None:
    control = ControlGroup(members=[1, 0, 1], copy=2, original=0)
    same = ({0: 0.5, 1: 1.0}, {0: 1.0, 1: 0.5, 2: 1.0}, control)
    flipped = ({0: 0.5, 1: 1.0}, {0: 0.5, 1: 1.0, 2: 1.0}, control)  # order reversed, and the copy differs
    report = controls_report([same, flipped, None])
    assert report.taus == [1.0, -1.0] and report.agreement == 0.0 and report.failed == 1
    assert report.copies == [True, False] and report.ordered_copies == 0.5
    assert report.follows_position and report.orders_copies and not report.ok
    assert controls_report([same]).ok


def test_a_broken_grader_comes_before_too_few() -> None:
    report = spread_report({}, failed={"TimeoutError": 9}, attempted=10, first_failures={"TimeoutError": "slow"})
    assert report.verdict == "broken" and "9 of 10 group(s)" in str(report)
    assert spread_report({}, failed={"TimeoutError": 8}, attempted=10).verdict == "too few"


def test_reward_mode_controls_catch_a_random_scorer() -> None:
    rows = [
        {"scenario_id": f"t{g}", "reward": 1, "final_text": "<tool_call>x</tool_call>" * (k % 3) + f"{g}"}
        for g in range(12)
        for k in range(4)
    ]

    def steady(item, rubric):
        return {"solution": 1.0, "behavior": 1.0 / (1 + item["completion"].count("<tool_call>"))}

    rng = random.Random(0)

    def noisy(item, rubric):
        return {"solution": 1.0, "behavior": rng.random()}

    good = wai.GroupwiseGrading(grader=steady, mode="reward").check_spread(rows, strict=False, controls=32)
    assert good.ok and good.controls.agreement == pytest.approx(1.0) and good.controls.ordered_copies == 0.0
    bad = wai.GroupwiseGrading(grader=noisy, mode="reward").check_spread(rows, strict=False, controls=32)
    assert bad.verdict == "no" and bad.controls.orders_copies


def test_controls_leave_the_counters_alone() -> None:
    rows = [{"scenario_id": f"t{g}", "reward": 1, "final_text": "x" * (k + 1)} for g in range(3) for k in range(3)]

    def by_length(group):
        return {"ranking": sorted((g["index"] for g in group), key=lambda i: len(group[i]["completion"]))}

    gar = wai.GroupwiseGrading(grader=by_length)
    gar.check_spread(rows, strict=False, controls=32)
    assert gar.stats.groups == 3 and gar.stats.grader_calls == 3


def test_the_injection_goes_where_the_policy_wrote_last() -> None:
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "done"}]}]
    assert changed(parts)[-1]["content"] == [
        {"type": "text", "text": "done"},
        {"type": "text", "text": INJECTION},
    ]
    tool_last = [{"role": "assistant", "content": "calling"}, {"role": "tool", "content": "ok"}]
    injected = changed(tool_last)
    assert injected[0]["content"] == "calling" + INJECTION and injected[1] == tool_last[1]


def test_the_injection_control_tries_prose_and_json_shaped_requests_and_says_which_held() -> None:
    import whileai as wai

    def obeys_json(group):
        # ranks by length, but first any pass that carries a JSON-shaped instruction to the grader
        passes = [g for g in group if g["passed"]]
        passes.sort(key=lambda g: ('"instruction_to_grader"' not in g["completion"], len(g["completion"])))
        return {"ranking": [g["index"] for g in passes]}

    rows = [
        {"scenario_id": f"s{i}", "reward": r, "final_text": "x" * (k + 1)}
        for i in range(8)
        for k, r in enumerate((1, 1, 1, 0))
    ]
    report = wai.GroupwiseGrading(grader=obeys_json).check_spread(rows, strict=False, controls=8)
    assert "injection held in 4 of 8 (4 of 4 text, 0 of 4 JSON-shaped)" in report.controls.line
    assert report.controls.warning.startswith("warning: injection held in 4 of 8 controls (4 of 4 text, 0 of 4 JSON")
    assert report.as_dict()["controls"]["injected_with"] == ["text", "JSON-shaped"] * 4
