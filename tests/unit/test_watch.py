"""``whileai.grading.watch``: when the spread watch checks, what a check reads and costs, and its policy."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.watch import SpreadWatch, WatchSettings

TEXTS = ["a", "bb", "ccc", "x"]  # three passes of different lengths, one failure


def by_length(group: list[dict[str, Any]]) -> dict[str, Any]:
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}


def step(watch: SpreadWatch, grading: GroupwiseGrading, number: int, groups: int = 2) -> dict[str, float]:
    rewards, prompts, texts = [1, 1, 1, 0] * groups, ["p"] * 4 * groups, TEXTS * groups
    return watch.observe(number, grading.grade_batch(rewards, prompts, texts, 4), prompts, texts, 4)


def test_checks_fall_on_multiples_of_every_steps_and_a_resume_makes_no_empty_checks() -> None:
    grading = GroupwiseGrading(grader=by_length)
    watch = SpreadWatch(grading, WatchSettings(every_steps=3), say=lambda _: None)
    logged = [bool(step(watch, grading, n)) for n in range(1, 8)]
    assert logged == [False, False, True, False, False, True, False]
    assert [c.step for c in watch.checks] == [3, 6] and all(c.verdict == "yes" for c in watch.checks)
    assert [c.first_step for c in watch.checks] == [1, 4]  # each window its own steps
    resumed = SpreadWatch(grading, WatchSettings(every_steps=3), say=lambda _: None)
    for n in range(8, 13):  # a run resumed from checkpoint-7
        step(resumed, grading, n)
    assert [c.step for c in resumed.checks] == [9, 12]


def test_a_completion_that_jumps_steps_makes_every_check_due() -> None:
    grading = GroupwiseGrading(grader=by_length)
    watch = SpreadWatch(grading, WatchSettings(every_steps=2), say=lambda _: None)
    for n in range(1, 6):
        watch.keep(n, grading.grade_batch([1, 1, 1, 0], ["p"] * 4, TEXTS, 4), ["p"] * 4, TEXTS, 4)
    watch.check_through(5)  # groups of steps 1-5 in at once (verl counts steps by groups)
    assert [(c.first_step, c.step, c.figures["groups"]) for c in watch.checks] == [(1, 2, 2.0), (3, 4, 2.0)]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.floats(0.0, 1.0), st.integers(1, 4))
def test_the_controls_never_cost_more_than_their_budget(controls: int, budget: float, groups: int) -> None:
    grading = GroupwiseGrading(grader=by_length)
    watch = SpreadWatch(
        grading, WatchSettings(every_steps=1, controls=controls, max_extra_calls=budget), say=lambda _: None
    )
    for n in range(1, 13):
        step(watch, grading, n, groups)
    extra = watch.checks[-1].figures["extra_calls"]
    assert extra <= budget * watch.checks[-1].figures["grader_calls"] + 1e-9
    assert grading.stats.grader_calls == 12 * groups  # the controls are kept out of the run's counters


def test_a_check_counts_fallbacks_and_hacks_and_stop_waits_for_patience() -> None:
    calls = {"n": 0}

    def flaky(group: list[dict[str, Any]]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] > 4:
            raise RuntimeError("down")
        return {**by_length(group), "hacks": [group[0]["index"]]}

    grading = GroupwiseGrading(grader=flaky)
    said: list[str] = []
    watch = SpreadWatch(grading, WatchSettings(every_steps=2, on_fail="stop", patience=2), say=said.append)
    first = {}
    for n in range(1, 3):
        first = step(watch, grading, n)
    assert first["whileai/watch/hack_rate"] == pytest.approx(4 / 12) and first["whileai/watch/fallback_rate"] == 0
    for n in range(3, 7):
        step(watch, grading, n)
    broken = watch.checks[1:]
    assert [c.verdict for c in broken] == ["broken", "broken"] and [c.failed_in_a_row for c in broken] == [1, 2]
    assert broken[0].figures["fallback_rate"] == 1.0 and not broken[0].stop and broken[1].stop
    assert watch.stop_requested and len(said) == 2 and "stopping the run" in said[1]


def test_another_process_takes_the_decision_from_the_logged_figures() -> None:
    grading = GroupwiseGrading(grader=by_length)
    peer = SpreadWatch(grading, WatchSettings(on_fail="stop", patience=2))
    peer.note({"whileai/watch/failed_in_a_row": 1.0})
    assert not peer.stop_requested
    peer.note({"whileai/watch/failed_in_a_row": 2.0})
    assert peer.stop_requested
    warned = SpreadWatch(grading, WatchSettings(on_fail="warn", patience=1))
    warned.note({"whileai/watch/failed_in_a_row": 5.0})
    assert not warned.stop_requested


def test_the_record_is_json_ready() -> None:
    grading = GroupwiseGrading(grader=by_length)
    records: list[dict[str, Any]] = []
    watch = SpreadWatch(grading, WatchSettings(every_steps=1, controls=0), say=lambda _: None, on_check=records.append)
    step(watch, grading, 1)
    (record,) = records
    assert record["control_tau"] is None and record["steps"] == [1, 1] and record["verdict"] == "yes"
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in record.values())


def test_a_window_too_thin_to_judge_neither_breaks_nor_adds_to_the_failures_in_a_row() -> None:
    grading = GroupwiseGrading(grader=lambda group: {"factors": {g["index"]: 0.5 for g in group if g["passed"]}})
    watch = SpreadWatch(grading, WatchSettings(every_steps=1, on_fail="stop", patience=2), say=lambda _: None)
    flat, thin = ([1, 1, 1, 0], TEXTS), ([1, 0, 0, 0], TEXTS)  # three alike passes; one pass: nothing to tell
    for number, (rewards, texts) in enumerate([flat, thin, flat], start=1):
        watch.observe(number, grading.grade_batch(rewards, ["p"] * 4, texts, 4), ["p"] * 4, texts, 4)
    assert [(c.verdict, c.failed_in_a_row, c.stop) for c in watch.checks] == [
        ("no", 1, False), ("too few", 1, False), ("no", 2, True),
    ]  # fmt: skip


def test_a_step_scored_in_several_batches_is_checked_once_all_are_in() -> None:
    grading = GroupwiseGrading(grader=by_length)
    watch = SpreadWatch(grading, WatchSettings(every_steps=2), say=lambda _: None, batches_per_step=2)
    for number in (1, 1, 2):
        assert step(watch, grading, number) == {}  # step 2's second batch is not in yet
    assert step(watch, grading, 2)["whileai/watch/groups"] == 8.0  # both batches of steps 1 and 2, 2 groups each
    # a count set too high delays a check by one batch, never skips it: step 3's batch completes step 2
    late = SpreadWatch(grading, WatchSettings(every_steps=2), say=lambda _: None, batches_per_step=5)
    for number in (1, 2, 3):
        step(late, grading, number)
    assert [(c.step, c.figures["groups"]) for c in late.checks] == [(2, 4.0)]


def test_keys_stay_unique_as_old_groups_are_let_go() -> None:
    grading = GroupwiseGrading(grader=by_length)
    watch = SpreadWatch(grading, WatchSettings(every_steps=2, window=1), say=lambda _: None)

    def keep(number: int) -> None:
        watch.keep(number, grading.grade_batch([1, 1, 1, 0], ["p"] * 4, TEXTS, 4), ["p"] * 4, TEXTS, 4)

    keep(3)
    keep(4)  # step 4's groups come in two calls (verl counts steps by groups), step 3's let go between them
    watch.check_through(3)
    keep(4)
    watch.check_through(4)
    assert [(c.step, c.figures["groups"]) for c in watch.checks] == [(4, 2.0)]


def test_the_plan_says_the_watch_s_cap_and_when_no_check_will_run() -> None:
    from pathlib import Path

    from whileai.config import load_recipe
    from whileai.config.build import train_setup
    from whileai.training.plan import training_plan

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu_gar.yaml"
    watch = dict(training_plan(train_setup(load_recipe(recipe, []))).steps)["spread watch"]
    assert "up to 2 controls a check while their calls stay within 5%" in watch and "no check" not in watch
    late = dict(training_plan(train_setup(load_recipe(recipe, ["spread.watch.every_steps=100"]))).steps)
    late = late["spread watch"]
    assert late.endswith("no check will run: max_steps 60 < every_steps")


class SlotFollower:
    """A grader that keeps position figures, as the HTTP judge's stats do: these say its scores follow the slot."""

    def __init__(self) -> None:
        self.stats = self

    def position(self) -> dict[str, float]:
        return {"effect": 0.5, "differences": 0.1, "orders": 20}

    def __call__(self, group: list[dict[str, Any]]) -> dict[str, Any]:
        return by_length(group)


def test_a_check_refuses_a_grader_whose_scores_follow_the_display_slot() -> None:
    grading = GroupwiseGrading(grader=SlotFollower())
    watch = SpreadWatch(grading, WatchSettings(every_steps=2, controls=2, max_extra_calls=1.0), say=lambda _: None)
    for n in range(1, 3):
        step(watch, grading, n)
    check = watch.checks[-1]
    assert check.verdict == "no" and check.rule == "controls"
    assert "follow the display slot more than they differ between passes" in check.why


def tied_by(sign: int):
    """Passes by length, shortest first (sign 1) or longest (-1), equal lengths tied."""

    def grader(group: list[dict[str, Any]]) -> dict[str, Any]:
        lengths = sorted({sign * len(g["completion"]) for g in group if g["passed"]})
        return {
            "ranking": [
                [g["index"] for g in group if g["passed"] and sign * len(g["completion"]) == n] for n in lengths
            ]
        }

    return grader


def test_a_grader_paying_for_length_is_named_with_how_far_the_passes_grew() -> None:
    said: list[str] = []
    records: list[dict[str, Any]] = []
    for grader, paid in ((tied_by(-1), True), (tied_by(1), False)):
        said.clear()
        records.clear()
        grading = GroupwiseGrading(grader=grader)
        settings_ = WatchSettings(every_steps=2, controls=3, max_extra_calls=1.0, on_fail="stop", patience=2)
        watch = SpreadWatch(grading, settings_, say=said.append, on_check=records.append)
        for n in range(1, 7):  # the passes grow by a word a step
            texts = [" ".join(["word"] * (n + k)) for k in range(3)] + ["fail"]
            rewards = [1, 1, 1, 0] * 2
            prompts, batch = ["p"] * 8, texts * 2
            watch.observe(n, grading.grade_batch(rewards, prompts, batch, 4), prompts, batch, 4)
        first, last = records[0], records[-1]
        assert last["length"] > first["length"] and last["pass_rate"] == 0.75
        if paid:
            assert last["length_tau"] == 1.0 and last["paid_for"] == ["padding", "formatting", "claim"]
            assert watch.stop_requested and last["verdict"] == "no"
            assert "the grader pays for length, markup, claims: the passes' length +" in said[-1]
            assert "since step 1 (its tau with the scores within groups +1.00)" in said[-1]
            assert "while the pass rate moved +0.0 points" in said[-1]
        else:
            assert last["length_tau"] == -1.0 and last["paid_for"] == [] and not said and not watch.stop_requested


def test_one_control_a_check_still_stops_a_grader_that_pays_for_one_surface() -> None:
    def markdown_first(group: list[dict[str, Any]]) -> dict[str, Any]:
        passes = [g for g in group if g["passed"]]
        keys = sorted({("#" not in g["completion"], len(g["completion"])) for g in passes})
        return {"ranking": [[g["index"] for g in passes if ("#" not in g["completion"], len(g["completion"])) == k]
                            for k in keys]}  # fmt: skip

    grading = GroupwiseGrading(grader=markdown_first)
    settings_ = WatchSettings(every_steps=1, controls=1, max_extra_calls=1.0, on_fail="stop", patience=3)
    watch = SpreadWatch(grading, settings_, say=lambda _: None)
    for n in range(1, 10):
        step(watch, grading, n)
        if watch.stop_requested:
            break
    kinds = [c.paid_for for c in watch.checks]
    assert watch.stop_requested and kinds[-3:] == [["formatting"]] * 3  # the kinds in turn, formatting remembered
    assert [c.controls_sent for c in watch.checks] == [1] * len(watch.checks)
