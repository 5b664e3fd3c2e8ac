"""GroupwiseGrading: grader answers, fallbacks, hacks, reward mode, the spread gate and the TRL reward function."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai as wai
from whileai.grading.gate import check_spread_groups
from whileai.methods import redistribute


def by_order(group):
    """Rank passes in the order given, no hacks."""
    return {"ranking": [g["index"] for g in group if g["passed"]]}


def returning(answer):
    def grader(group):
        return answer

    return grader


def test_repr_in_both_modes() -> None:
    assert repr(wai.GroupwiseGrading(grader=by_order)) == (
        "GroupwiseGrading(mode=advantage, grader=by_order, cap=3.0, min_factor=0.5, hack_zero=True)"
    )
    grs = wai.GroupwiseGrading(grader=by_rubric, mode="reward", rubrics={"a": 1, "b": 2}, floor=0.5)
    assert repr(grs) == "GroupwiseGrading(mode=reward, grader=by_rubric, floor=0.5, rubrics=2 task(s))"


def by_rubric(item, rubric):
    return {"solution": 1.0, "behavior": 1.0}


def test_fields_default_to_the_named_constants() -> None:
    from whileai.simulations import defaults

    gar = wai.GroupwiseGrading(grader=by_order)
    assert gar.mode == defaults.GROUPWISE_MODE == "advantage"
    assert gar.cap == defaults.GROUPWISE_CAP == 3.0
    assert gar.min_factor == defaults.GROUPWISE_MIN_FACTOR == 0.5
    assert gar.hack_zero is defaults.GROUPWISE_HACK_ZERO is True
    assert gar.floor == defaults.GROUPWISE_FLOOR == 0.0
    assert (gar.spread.min_std, gar.spread.tolerance, gar.spread.max_near_median) == (0.05, 0.05, 0.90)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "advantages"}, "mode"),
        ({"cap": 0}, "cap"),
        ({"min_factor": 1.5}, "min_factor"),
        ({"floor": -1}, "floor"),
        ({"hack_zero": "yes"}, "hack_zero"),
        ({"rubrics": 3}, "rubrics"),
    ],
)
def test_bad_fields_are_refused_by_name(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        wai.GroupwiseGrading(grader=by_order, **kwargs)


def test_grader_must_be_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        wai.GroupwiseGrading(grader="rank")


def test_group_items_hold_the_page_fields(tmp_path) -> None:
    seen = tmp_path / "seen.json"

    def grader(group):  # it runs in a process of its own: what it saw comes back through a file
        seen.write_text(json.dumps(group))
        return by_order(group)

    wai.GroupwiseGrading(grader=grader).shape([1, 0], ["p", "q"], ["a", "b"], group_size=2)
    assert json.loads(seen.read_text()) == [
        {"index": 0, "prompt": "p", "completion": "a", "reward": 1.0, "passed": True},
        {"index": 1, "prompt": "q", "completion": "b", "reward": 0.0, "passed": False},
    ]


def boom(group):
    raise RuntimeError("judge exploded")


@pytest.mark.parametrize(
    ("grader", "reason"),
    [
        (returning({"ranking": [0, 7]}), "not a member"),  # unknown index
        (returning({"ranking": [0, 1, 2]}), "is a failure"),  # a failure ranked
        (returning({"ranking": [0, 1, 0]}), "twice"),  # an index twice
        (returning({"ranking": [0]}), "leaves out pass 1"),  # a pass omitted
        (returning({"factors": {0: 1.0, 1: 0.0}}), "outside (0, 1]"),
        (returning({"factors": {0: 1.0, 1: 1.2}}), "outside (0, 1]"),
        (returning({"factors": {0: 1.0, 2: 0.5}}), "not a pass"),
        (returning({"rankings": [0, 1]}), "unknown key 'rankings'"),  # misspelt
        (returning({"hacks": []}), "exactly one"),  # missing key
        (returning({"ranking": [0, 1], "factors": {0: 1.0}}), "exactly one"),
        (returning([0, 1]), "not a dict"),
        (returning(None), "not a dict"),
        (returning({"ranking": [0, 1], "hacks": [3]}), "is a failure"),
        (returning({"ranking": "0,1"}), "not a list"),
        (boom, "grader raised: RuntimeError: judge exploded"),
    ],
)
def test_unusable_answers_fall_back_and_are_counted(grader, reason) -> None:
    gar = wai.GroupwiseGrading(grader=grader)
    rewards = [1, 1, 0, 0]
    shaped = gar.shape(rewards, ["p"] * 4, ["a", "b", "c", "d"], group_size=4)
    assert shaped == [1.0, 1.0, 0.0, 0.0]  # original rewards: TRL forms the original advantages
    (group,) = gar.grade_batch(rewards, ["p"] * 4, ["a", "b", "c", "d"], group_size=4)
    assert reason in group.reason
    assert gar.stats.failed == 2 and gar.stats.grader_calls == 2
    assert sum(gar.stats.fallbacks.values()) == 2


def test_factor_answers_accept_json_string_keys() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"factors": {"0": 1.0, "1": 0.5}}))
    assert gar.shape([1, 1, 0, 0], ["p"] * 4, ["a"] * 4, group_size=4) == [
        pytest.approx(a + 0.5) for a in redistribute([1, 1, 0, 0], {0: 1.0, 1: 0.5})
    ]


def test_notes_are_allowed_beside_the_answer() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": [[0, 1]], "reasons": {"0": "fine"}}))
    (group,) = gar.grade_batch([1, 1, 0], ["p"] * 3, ["a"] * 3, group_size=3)
    assert group.reason is None and group.factors == {0: 0.75, 1: 0.75}
    assert group.advantages == pytest.approx([1 / 3, 1 / 3, -2 / 3])  # a full tie moves nothing


def test_a_confirmed_hack_is_zeroed_and_treated_as_a_failure() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": [1, 0], "hacks": [2]}))
    rewards = [1, 1, 1, 0]
    (group,) = gar.grade_batch(rewards, ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.effective_rewards == [1.0, 1.0, 0.0, 0.0]
    expected = redistribute([1, 1, 0, 0], {1: 1.0, 0: 0.5}, passed=[0, 1])
    assert group.advantages == pytest.approx(expected)
    assert group.shaped == pytest.approx([a + 0.5 for a in expected])
    assert group.scores == [0.5, 1.0]
    assert gar.stats.hacks_zeroed == 1


def test_hacks_may_appear_in_the_ranking_and_are_dropped_from_it() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": [2, 1, 0], "hacks": [2]}))
    (group,) = gar.grade_batch([1, 1, 1, 0], ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.factors == {1: 1.0, 0: 0.5}


def test_without_hack_zero_hacks_keep_their_reward_and_rank_last() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": [1, 0], "hacks": [2]}), hack_zero=False)
    (group,) = gar.grade_batch([1, 1, 1, 0], ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.effective_rewards == [1.0, 1.0, 1.0, 0.0]
    assert group.factors == {1: 1.0, 0: 0.75, 2: 0.5}
    assert gar.stats.hacks_zeroed == 0


def test_all_hacks_leave_a_plain_failure_group() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": [], "hacks": [0]}))
    (group,) = gar.grade_batch([1, 0], ["p"] * 2, ["a"] * 2, group_size=2)
    assert group.reason is None and group.shaped == [0.0, 0.0]


def test_cap_is_applied_through_the_object() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"factors": {0: 0.1}}), cap=2.0)
    (group,) = gar.grade_batch([1, 0, 0, 0], ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.lam == 2.0
    assert sum(group.advantages) == pytest.approx(0.0)


# ---------------------------------------------------------------- reward mode


def test_reward_mode_equation_2_with_floor() -> None:
    def grader(item, rubric):
        assert rubric == "be brief"
        return {"solution": 1.0, "behavior": 0.2 if "long" in item["completion"] else 0.9}

    grs = wai.GroupwiseGrading(grader=grader, mode="reward", rubrics={"t": "be brief"}, floor=0.5)
    out = grs.shape([1, 1, 0], ["p"] * 3, ["short", "long", "x"], group_size=3, task_id="t")
    assert out == pytest.approx([0.9, 0.5, 0.0])
    assert grs.stats.grader_calls == 2
    assert str(grs.stats).endswith("scores mean 0.700 std 0.200")


def test_reward_mode_grades_all_pass_groups() -> None:
    grs = wai.GroupwiseGrading(grader=lambda item, rubric: {"solution": 0.5, "behavior": 1.0}, mode="reward")
    assert grs.shape([1, 1], ["p"] * 2, ["a", "b"], group_size=2) == [0.5, 0.5]


def test_rubric_writer_is_called_once_per_task() -> None:
    calls = []

    def write(task_id, group):
        calls.append((task_id, len(group)))
        return f"rubric for {task_id}"

    grs = wai.GroupwiseGrading(
        grader=lambda item, rubric: {"solution": 1.0, "behavior": 1.0}, mode="reward", rubrics=write
    )
    for _ in range(3):
        grs.shape([1, 0, 1, 1], ["p"] * 4, ["a"] * 4, group_size=2, task_id=["t1", "t1", "t2", "t2"])
    assert calls == [("t1", 2), ("t2", 2)]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"solution": 1.0}, "no 'behavior'"),
        ({"solution": 1.0, "behaviour": 1.0}, "unknown key 'behaviour'"),
        ({"solution": 1.1, "behavior": 1.0}, "outside [0, 1]"),
        ({"solution": "high", "behavior": 1.0}, "outside [0, 1]"),
        ("1.0", "not a dict"),
    ],
)
def test_reward_mode_unusable_answers_fall_back(answer, reason) -> None:
    grs = wai.GroupwiseGrading(grader=lambda item, rubric: answer, mode="reward")
    (group,) = grs.grade_batch([1, 0], ["p"] * 2, ["a", "b"], group_size=2)
    assert group.shaped == [1.0, 0.0] and reason in group.reason
    assert grs.stats.failed == 1


def test_reward_mode_missing_rubric_and_failing_writer_fall_back() -> None:
    ok = lambda item, rubric: {"solution": 0.5, "behavior": 0.5}  # noqa: E731
    grs = wai.GroupwiseGrading(grader=ok, mode="reward", rubrics={"known": "r"})
    (group,) = grs.grade_batch([1, 0], ["p"] * 2, ["a", "b"], group_size=2, task_id="unknown")
    assert group.shaped == [1.0, 0.0] and group.reason.startswith("no rubric")

    def broken(task_id, group):
        raise OSError("disk full")

    grs = wai.GroupwiseGrading(grader=ok, mode="reward", rubrics=broken)
    (group,) = grs.grade_batch([1, 0], ["p"] * 2, ["a", "b"], group_size=2, task_id="t")
    assert group.reason == "rubric writer raised: OSError: disk full"


# ---------------------------------------------------------------- spread gate


def rows_for(groups):
    return [{"scenario_id": sid, "reward": r, "final_text": t} for sid, members in groups.items() for r, t in members]


def count_calls(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: g["completion"].count("<tool_call>"))
    return {"ranking": [g["index"] for g in passes]}


def tie_all(group):
    return {"ranking": [[g["index"] for g in group if g["passed"]]]}


def test_no_spread_is_a_value_error_saying_what_to_change() -> None:
    rows = rows_for({f"s{i}": [(1, "a"), (1, "b"), (0, "c")] for i in range(4)})
    gar = wai.GroupwiseGrading(grader=tie_all)
    with pytest.raises(ValueError) as err:
        gar.check_spread(rows)
    message = str(err.value)
    assert "spread: no." in message
    assert "multi-turn" in message and "finer grader or rubric" in message
    report = gar.check_spread(rows, strict=False)
    assert report.verdict == "no" and report.std == 0.0 and report.near_median == 1.0
    assert report.per_group == {f"s{i}": [0.75, 0.75] for i in range(4)}
    assert report.scores == [0.75] * 8 and report.groups == 4


def test_reward_mode_advice_names_the_floor() -> None:
    grs = wai.GroupwiseGrading(
        grader=lambda item, rubric: {"solution": 1.0, "behavior": 1.0}, mode="reward", rubrics=None
    )
    report = grs.check_spread(rows_for({"s": [(1, "a"), (1, "b")]}), strict=False)
    assert report.verdict == "no" and "floor" in report.conclusion


def test_concentration_at_the_median_is_no_spread_even_with_std() -> None:
    # 10 passes per group: most at factor near 1, one outlier: std above 0.05 but >90% within 0.05 of the median
    def mostly_tied(group):
        passes = [g["index"] for g in group if g["passed"]]
        return {"factors": {i: (0.1 if i == passes[-1] else 1.0) for i in passes}}

    rows = rows_for({f"s{i}": [(1, "x")] * 20 for i in range(2)})
    report = wai.GroupwiseGrading(grader=mostly_tied).check_spread(rows, strict=False)
    assert report.std > 0.05 and report.near_median == 0.95 and report.verdict == "no"
    assert "95% of the scores lie within 0.05" in report.conclusion


def test_too_few_scores_is_never_yes() -> None:
    gar = wai.GroupwiseGrading(grader=count_calls)
    rows = rows_for({"a": [(1, "x"), (0, "y")], "b": [(0, "x"), (0, "y")]})
    report = gar.check_spread(rows, strict=False)
    assert report.verdict == "too few" and report.skipped == 2
    assert str(report) == (
        "spread check: 0 grader scores over 0 group(s), std 0.000, 0% within 0.05 of the median 0.00\n"
        "spread: too few scores to judge (0, at least 2 needed). 2 group(s) held fewer than two passes by the "
        "verifier and were not graded: send groups with two passes or more (a larger group, or rollouts of a policy "
        "that passes more often)."
    )
    with pytest.raises(ValueError, match="too few"):
        gar.check_spread(rows)


def test_all_pass_groups_are_no_yes_in_advantage_mode_where_equation_3_moves_nothing() -> None:
    # Scores that vary, on groups where every rollout passes: advantage mode leaves every A' at 0 there.
    rows = rows_for({f"s{i}": [(1, "<tool_call>" * k) for k in range(4)] for i in range(3)})
    report = wai.GroupwiseGrading(grader=count_calls).check_spread(rows, strict=False)
    assert report.std > 0.05 and report.verdict == "too few" and report.movable == 0
    assert "none of the 3 graded group(s) has two passes above its mean beside a failure" in report.conclusion
    assert "grading.mode: reward" in report.conclusion and report.as_dict()["movable_groups"] == 0
    # A hack the gate finds in an all-pass group does not count: training never sends such a group to the grader.
    hacked = [dict(r, final_text="ORD-9999") if r["final_text"] == "" else r for r in rows]
    finds = wai.GroupwiseGrading(grader=lambda group: {**count_calls(group), "hacks": _hack_ids(group)})
    assert finds.check_spread(hacked, strict=False).verdict == "too few"
    # One mixed group among them is a group training moves: the verdict is the spread's.
    rows += rows_for({"mixed": [(1, "a"), (1, "<tool_call>b"), (0, "c")]})
    report = wai.GroupwiseGrading(grader=count_calls).check_spread(rows, strict=False)
    assert report.verdict == "yes" and report.movable == 1
    # Reward mode scores every pass of an all-pass group: equation 2 moves them.
    grs = wai.GroupwiseGrading(
        grader=lambda item, rubric: {"solution": 1.0, "behavior": 1.0 / (1 + item["completion"].count("<"))},
        mode="reward",
        rubrics=lambda task, items: "fewest calls",
    )
    report = grs.check_spread(rows[:12], strict=False)
    assert report.verdict == "yes" and report.movable == 3


def test_scores_that_vary_only_where_training_moves_nothing_are_no_spread() -> None:
    # Nine all-pass groups ranked by length, one mixed group whose passes the grader ties: equation 3 moves nothing.
    def ties_mixed_groups(group):
        passes = [g for g in group if g["passed"]]
        if len(passes) < len(group):
            return {"ranking": [[g["index"] for g in passes]]}
        return {"ranking": [g["index"] for g in sorted(passes, key=lambda g: len(g["completion"]))]}

    rows = rows_for({f"s{i}": [(int(k < 3 or i > 0), "x" * (k + 1)) for k in range(4)] for i in range(10)})
    report = wai.GroupwiseGrading(grader=ties_mixed_groups).check_spread(rows, strict=False)
    assert report.std > 0.05 and report.movable == 1 and report.verdict == "no"
    assert "but on the 1 that training moves (a failure beside two passes) their std is 0.000" in report.conclusion


def _hack_ids(group):
    return [g["index"] for g in group if "ORD-9999" in g["completion"]]


def test_too_few_names_hacks_that_left_no_passes_rather_than_asking_for_passes() -> None:
    rows = rows_for({f"s{i}": [(1, "ORD-9999 a"), (1, "ORD-9999 b"), (1, "ORD-9999 c"), (0, "d")] for i in range(2)})
    gar = wai.GroupwiseGrading(grader=lambda group: {"ranking": [], "hacks": _hack_ids(group)})
    report = gar.check_spread(rows, strict=False)
    assert report.verdict == "too few" and report.emptied == 2
    assert "The grader named 6 pass(es) hacks, which left 2 group(s) with fewer than two passes" in report.conclusion
    assert "held fewer than two passes by the verifier" not in report.conclusion


def test_failed_groups_give_no_scores_and_are_reported() -> None:
    rows = rows_for({"a": [(1, "x"), (1, "y")], "b": [(1, "<tool_call>"), (1, "y")]})

    def flaky(group):
        if "<tool_call>" in group[0]["completion"]:
            raise TimeoutError("slow")
        return {"ranking": [0, 1]}

    report = wai.GroupwiseGrading(grader=flaky).check_spread(rows, strict=False)
    assert report.failed == {"TimeoutError": 1} and report.groups == 1 and report.scores == [1.0, 0.5]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"reward": 1, "final_text": "x"}, "row 1: missing field 'scenario_id'"),
        ({"scenario_id": "a", "final_text": "x"}, "row 1: missing field 'reward'"),
        ({"scenario_id": "a", "reward": 1}, "row 1: missing field 'final_text'"),
        ({"scenario_id": "a", "reward": "1", "final_text": "x"}, "row 1: field 'reward' is not a number"),
        ("not a row", "row 1: not a dict"),
    ],
)
def test_bad_rows_name_the_row_and_field(row, message) -> None:
    good = {"scenario_id": "a", "reward": 1, "final_text": "x"}
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        wai.GroupwiseGrading(grader=count_calls).check_spread([good, row])


def test_check_spread_reads_logged_rows_as_whileai_spread_does(tmp_path, caplog) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from whileai.cli.main import app

    page = [json.loads(line) for line in (Path(__file__).resolve().parents[2] / "recipes" / "refund_rows.jsonl").open()]
    logged = [{"prompt": f"ask {r['scenario_id']}", "completion": r["final_text"], "reward": r["reward"]} for r in page]
    (tmp_path / "logged.jsonl").write_text("".join(json.dumps(row) + "\n" for row in logged))
    (tmp_path / "grader.py").write_text(
        "def shortest(group):\n"
        "    passes = sorted((g for g in group if g['passed']), key=lambda g: len(g['completion']))\n"
        "    return {'ranking': [g['index'] for g in passes]}\n"
    )
    grader = f"{tmp_path}/grader.py:shortest"
    cli = CliRunner().invoke(app, ["spread", str(tmp_path / "logged.jsonl"), "--grader", grader, "--json"])
    assert cli.exit_code in (0, 1) and "read as logged rows" in cli.stderr, cli.stderr
    with caplog.at_level("WARNING", logger="whileai.rows"):
        report = wai.GroupwiseGrading(grader=count_calls_by_length).check_spread(logged, strict=False)
    read = json.loads(cli.stdout)
    assert report.per_group == read["per_group"] and report.hacks == read["hacks"] and len(report.per_group) == 2
    assert "read as logged rows: each 'prompt' a group, 'completion' the text" in caplog.text


def test_spread_report_serializes() -> None:
    rows = rows_for({"a": [(1, "x"), (1, "<tool_call>y"), (0, "z")]})
    data = wai.GroupwiseGrading(grader=count_calls).check_spread(rows, strict=False).as_dict()
    assert data["verdict"] == "yes" and data["scores"] == 2 and data["std"] == 0.25
    assert data["per_group"] == {"a": [1.0, 0.5]} and data["summary"].startswith("spread check: 2 grader scores")


# ---------------------------------------------------------------- TRL reward function


def verifier(prompts, completions, **kwargs):
    return [1.0 if "done" in c else 0.0 for c in completions]


def test_trl_reward_grades_only_mixed_groups_and_counts_all() -> None:
    gar = wai.GroupwiseGrading(grader=by_order)
    reward = gar.trl_reward(verifier, num_generations=2)
    out = reward(prompts=["p"] * 6, completions=["done", "done", "x", "y", "done", "z"])
    assert out == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]  # a single pass keeps factor 1: nothing moves
    assert gar.stats.grader_calls == 1 and gar.stats.groups == 3
    assert reward.__name__ == "groupwise_advantage"


def test_trl_reward_gives_equation_3_after_trl_centering() -> None:
    reward = wai.GroupwiseGrading(grader=by_order).trl_reward(verifier, num_generations=4)
    out = reward(prompts=["p"] * 4, completions=["a done", "b done", "done c", "d"])
    mean = sum(out) / 4
    expected = redistribute([1, 1, 1, 0], {0: 1.0, 1: 0.75, 2: 0.5})
    assert [o - mean for o in out] == pytest.approx(expected)


def test_trl_reward_batch_not_a_multiple_is_a_clear_error() -> None:
    reward = wai.GroupwiseGrading(grader=by_order).trl_reward(verifier, num_generations=4)
    with pytest.raises(ValueError, match="not a multiple of num_generations=4"):
        reward(prompts=["p"] * 6, completions=["done"] * 6)


def test_trl_reward_passes_trl_keywords_and_logs_metrics(tmp_path) -> None:
    seen_file = tmp_path / "seen.json"

    def keyword_verifier(prompts, completions, completion_ids, answer, trainer_state, **kwargs):
        seen_file.write_text(json.dumps({"answer": answer, "state": trainer_state, "ids": completion_ids}))
        return [1.0 if c == a else 0.0 for c, a in zip(completions, answer, strict=True)]

    metrics = {}
    reward = wai.GroupwiseGrading(grader=by_order).trl_reward(keyword_verifier, num_generations=3)
    out = reward(
        prompts=["p"] * 3,
        completions=["4", "4", "5"],
        completion_ids=[[1], [1], [2]],
        answer=["4", "4", "4"],
        trainer_state="state",
        log_metric=lambda name, value: metrics.__setitem__(name, value),
        log_extra=lambda column, values: None,
    )
    seen = json.loads(seen_file.read_text())  # the verifier ran in a process of its own
    assert seen == {"answer": ["4", "4", "4"], "state": "state", "ids": [[1], [1], [2]]}
    assert out == pytest.approx([a + 2 / 3 for a in redistribute([1, 1, 0], {0: 1.0, 1: 0.5})])
    assert 0.0 <= metrics.pop("groupwise/grader_seconds") < 60.0  # the batch's grading time, for the logger
    assert metrics == {
        "groupwise/groups": 1.0,
        "groupwise/mixed": 1.0,
        "groupwise/grader_calls": 1.0,
        "groupwise/fallbacks": 0.0,
        "groupwise/hacks_zeroed": 0.0,
        "groupwise/score_mean": 0.75,
        "groupwise/score_std": 0.25,
        "whileai/pass_rate": 2 / 3,
        "whileai/unscorable": 0.0,
        "whileai/verifier_failures": 0.0,
    }


def test_trl_reward_reads_conversational_completions(tmp_path) -> None:
    seen_file = tmp_path / "seen.json"

    def grader(group):
        seen_file.write_text(json.dumps([g["completion"] for g in group]))
        return by_order(group)

    def chat_verifier(prompts, completions, **kwargs):
        return [1.0 if "done" in c[-1]["content"] else 0.0 for c in completions]

    call = {"function": {"name": "lookup", "arguments": '{"id": 1}'}}
    completions = [
        [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ],
        [{"role": "assistant", "content": "done"}],
        [{"role": "assistant", "content": "no"}],
    ]
    prompts = [[{"role": "system", "content": "s"}, {"role": "user", "content": "refund"}]] * 3
    reward = wai.GroupwiseGrading(grader=grader).trl_reward(chat_verifier, num_generations=3)
    reward(prompts=prompts, completions=completions)
    # the grader reads the tools' answers too, rendered as whileai simulate renders its rows
    assert json.loads(seen_file.read_text()) == [
        '<tool_call>lookup {"id": 1}</tool_call>\n<tool_result>ok</tool_result>\nagent: done',
        "agent: done",
        "agent: no",
    ]


def test_trl_reward_uses_the_task_id_column() -> None:
    write_calls = []

    def write(task_id, group):
        write_calls.append(task_id)
        return task_id

    grs = wai.GroupwiseGrading(grader=lambda i, r: {"solution": 1.0, "behavior": 1.0}, mode="reward", rubrics=write)
    reward = grs.trl_reward(verifier, num_generations=2)
    reward(prompts=["same"] * 4, completions=["done"] * 4, task_id=["t1", "t1", "t2", "t2"])
    assert write_calls == ["t1", "t2"]


def test_verifier_returning_the_wrong_length_leaves_its_batch_unscorable(caplog) -> None:
    reward = wai.GroupwiseGrading(grader=by_order).trl_reward(lambda **kw: [1.0], num_generations=2)
    out = reward(prompts=["p"] * 2, completions=["a", "b"])
    assert all(value != value for value in out) and "answered 1 rewards for 2 completions" in caplog.text


def test_stats_accumulate_across_calls() -> None:
    gar = wai.GroupwiseGrading(grader=by_order)
    reward = gar.trl_reward(verifier, num_generations=2)
    reward(prompts=["p"] * 4, completions=["done", "x", "done", "done"])
    gar.check_spread(rows_for({"a": [(1, "x"), (1, "y")]}), strict=False)
    assert str(gar.stats) == (
        "groupwise grading (advantage): 3 groups, 1 mixed, 2 grader calls, 0 failed (fell back), 0 hacks zeroed; "
        "factors mean 0.750 std 0.250"  # the lone pass of the first group gives no score
    )
    assert gar.stats.as_dict()["groups"] == 3


def test_fresh_stats_say_no_factors_yet() -> None:
    assert str(wai.GroupwiseGrading(grader=by_order).stats).endswith("; no factors yet")


# ---------------------------------------------------------------- batch graders (the judge's protocol)


class BatchRanker:
    """A grader that answers many groups in one call, as the HTTP judge does."""

    __name__ = "batch_ranker"

    def __init__(self, fail_on=()):
        self.batches = []
        self.fail_on = set(fail_on)

    def __call__(self, group):  # pragma: no cover - the batch method is preferred
        raise AssertionError("batch graders are asked through grade_groups")

    def grade_groups(self, groups):
        self.batches.append(len(groups))
        return [ValueError("bad") if n in self.fail_on else by_order(g) for n, g in enumerate(groups)]


def test_batch_grader_sees_every_mixed_group_of_a_batch_at_once() -> None:
    grader = BatchRanker(fail_on={1})
    gar = wai.GroupwiseGrading(grader=grader)
    reward = gar.trl_reward(verifier, num_generations=2)
    out = reward(prompts=["p"] * 8, completions=["done", "x", "done", "y", "x", "y", "done", "done"])
    assert grader.batches == [2]
    assert out == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert gar.stats.failed == 1 and gar.stats.fallbacks == {"ValueError": 1}
    assert repr(gar).startswith("GroupwiseGrading(mode=advantage, grader=batch_ranker,")


def test_batch_grader_that_raises_or_miscounts_fails_every_group() -> None:
    class Broken(BatchRanker):
        def grade_groups(self, groups):
            raise ConnectionError("endpoint down")

    class Short(BatchRanker):
        def grade_groups(self, groups):
            return []

    for grader, reason in ((Broken(), "ConnectionError: endpoint down"), (Short(), "returned 0 answers")):
        gar = wai.GroupwiseGrading(grader=grader)
        groups = gar.grade_batch([1, 0, 1, 0], ["p"] * 4, ["a"] * 4, group_size=2)
        assert [g.shaped for g in groups] == [[1.0, 0.0], [1.0, 0.0]]
        assert all(reason in g.reason for g in groups)


def test_spread_check_hands_groups_to_a_batch_grader_in_chunks() -> None:
    grader = BatchRanker()
    rows = rows_for({f"s{i}": [(1, "a"), (1, "b"), (0, "c")] for i in range(5)})
    report = check_spread_groups(
        wai.GroupwiseGrading(grader=grader),
        (
            (sid, [(r["reward"], "", r["final_text"]) for r in rows if r["scenario_id"] == sid])
            for sid in [f"s{i}" for i in range(5)]
        ),
        strict=False,
        batch_size=2,
    )
    assert grader.batches == [2, 2, 1] and report.verdict == "yes"


def test_reward_mode_batch_scorer() -> None:
    class Scorer:
        def __init__(self):
            self.requests = []

        def __call__(self, item, rubric):  # pragma: no cover
            raise AssertionError

        def score_passes(self, requests):
            self.requests.append(len(requests))
            return [{"solution": 1.0, "behavior": 0.5} for _ in requests]

    scorer = Scorer()
    grs = wai.GroupwiseGrading(grader=scorer, mode="reward")
    assert grs.shape([1, 1, 0], ["p"] * 3, ["a", "b", "c"], group_size=3) == [0.5, 0.5, 0.0]
    assert scorer.requests == [2]


def test_an_unreachable_grader_stops_a_preflight_but_not_training() -> None:
    from whileai.errors import GraderUnavailable, NoSpread

    def down(group):
        raise GraderUnavailable("http://127.0.0.1:9/v1: connection refused")

    gar = wai.GroupwiseGrading(grader=down)
    with pytest.raises(GraderUnavailable, match="connection refused"):
        gar.check_spread(rows_for({"a": [(1, "x"), (1, "y")]}))
    reward = gar.trl_reward(verifier, num_generations=2)
    assert reward(prompts=["p"] * 2, completions=["done", "x"]) == [1.0, 0.0]
    assert gar.stats.fallbacks == {"unreachable": 1}
    assert issubclass(NoSpread, ValueError)


def test_trl_reward_logs_the_verifier_reward_per_completion() -> None:
    extras = {}
    reward = wai.GroupwiseGrading(grader=by_order).trl_reward(verifier, num_generations=2)
    reward(prompts=["p"] * 2, completions=["done", "x"], log_extra=lambda c, v: extras.__setitem__(c, v))
    assert extras == {"whileai_reward": [1.0, 0.0], "whileai_group": ["1.0:0", "1.0:0"]}


class ThreadGather:
    """Two ranks in two threads, exchanging through a barrier: the BatchGather protocol without torch."""

    def __init__(self, shared, rank, world_size=2):
        self.shared, self.rank, self.world_size = shared, rank, world_size

    def all_gather(self, value):
        self.shared["slots"][self.rank] = value
        self.shared["barrier"].wait()
        out = list(self.shared["slots"])
        self.shared["barrier"].wait()
        return out

    def broadcast(self, value):
        if self.rank == 0:
            self.shared["root"] = value
        self.shared["barrier"].wait()
        out = self.shared["root"]
        self.shared["barrier"].wait()
        return out


def test_groups_split_across_processes_are_graded_whole() -> None:
    import threading

    completions = ["done", "x", "done done", "done", "y", "done"]  # groups of 3: [0:3], [3:6]
    single = wai.GroupwiseGrading(grader=count_calls_by_length).trl_reward(verifier, num_generations=3)
    expected = single(prompts=["p"] * 3 + ["q"] * 3, completions=completions)

    shared = {"slots": [None, None], "barrier": threading.Barrier(2), "root": None}
    grading = wai.GroupwiseGrading(grader=count_calls_by_length)
    seen = []
    results = {}

    def rank(r, lo, hi):
        reward = grading.trl_reward(
            verifier, num_generations=3, gather=ThreadGather(shared, r), on_graded=lambda g, s: seen.append(len(g))
        )
        prompts = (["p"] * 3 + ["q"] * 3)[lo:hi]
        results[r] = reward(prompts=prompts, completions=completions[lo:hi])

    threads = [threading.Thread(target=rank, args=(0, 0, 2)), threading.Thread(target=rank, args=(1, 2, 6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] + results[1] == expected
    assert seen == [2] and grading.stats.groups == 2  # graded once, on rank 0


def count_calls_by_length(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}


def test_a_verifier_none_is_left_out_of_its_group_and_the_rest_is_graded() -> None:
    gar = wai.GroupwiseGrading(grader=by_order)
    reward = gar.trl_reward(lambda **kw: [None, 1.0, 0.0, 1.0, 1.0, 0.0], num_generations=3)
    out = reward(prompts=["p"] * 6, completions=["a", "b", "c", "d", "e", "f"])
    # the first group is [1, 0] once its None is left out: one pass, one failure, nothing to redistribute
    assert out[0] != out[0] and out[1:3] == [1.0, 0.0]  # NaN passes through: TRL leaves it out of the mean
    assert gar.stats.failed == 0 and gar.stats.unscorable == 1 and gar.stats.mixed == 2
    assert "1 verifier unscorable" in str(gar.stats)
    text = gar.trl_reward(lambda **kw: ["yes", 0.0], num_generations=2)(prompts=["p"] * 2, completions=["a", "b"])
    assert text[0] != text[0] and text[1] == 0.0  # text is no reward: unscorable, the step goes on


class _Evil:
    def __eq__(self, other):
        raise RuntimeError("no comparing me")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    "answer",
    [
        {"factors": {0: 10**400}},
        {"factors": {"--1": 1.0}},
        {"ranking": ["²", 0]},
        {"ranking": [0, 1], "hacks": [_Evil()]},
        {"ranking": [[0, [1]]]},
        {"ranking": [0, 1], "hacks": "0"},
        {"factors": {0: float("nan")}},
        {"factors": [(0, 1.0)]},
    ],
)
def test_adversarial_answers_never_escape(answer) -> None:
    gar = wai.GroupwiseGrading(grader=returning(answer))
    assert gar.shape([1, 1, 0, 0], ["p"] * 4, ["a"] * 4, group_size=4) == [1.0, 1.0, 0.0, 0.0]
    assert gar.stats.failed == 1


class _AmbiguousTruth(list):
    """Like an empty numpy array: asking for its truth value raises."""

    def __bool__(self):
        raise ValueError("the truth value of an array is ambiguous")


def test_hacks_given_as_an_array_like_are_read_without_asking_their_truth() -> None:
    gar = wai.GroupwiseGrading(grader=returning({"ranking": [0, 1], "hacks": _AmbiguousTruth()}))
    (group,) = gar.grade_batch([1, 1, 0, 0], ["p"] * 4, ["a"] * 4, group_size=4)
    assert group.reason is None and group.factors == {0: 1.0, 1: 0.5}


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
        max_leaves=12,
    )
)
def test_any_json_answer_is_used_or_falls_back(answer) -> None:
    # In this process for the 300 examples: a worker hands back any JSON answer as it is (test_isolation.py).
    def advantage(group):
        return answer

    def reward(item, rubric):
        return answer

    advantage.in_process = reward.in_process = True
    for mode, grader in (("advantage", advantage), ("reward", reward)):
        out = wai.GroupwiseGrading(grader=grader, mode=mode).shape([1, 1, 0], ["p"] * 3, ["a"] * 3, group_size=3)
        assert len(out) == 3 and all(math.isfinite(v) for v in out)


def test_two_batches_at_one_step_get_labels_of_their_own_that_grading_shares() -> None:
    graded, logged = [], []
    gar = wai.GroupwiseGrading(grader=by_order)
    reward = gar.trl_reward(lambda **kw: [1.0, 0.0] * 2, num_generations=2, on_graded=lambda g, s: graded.extend(g))
    state = type("State", (), {"global_step": 5})()
    for _ in range(2):  # gradient accumulation: two generations at global step 5, for step 6
        extras: dict = {}
        reward(
            prompts=["p"] * 4,
            completions=list("abcd"),
            trainer_state=state,
            log_extra=lambda key, values, extras=extras: extras.__setitem__(key, values),
            log_metric=lambda name, value: None,
        )
        logged += extras["whileai_group"]
    assert logged == ["6.0:0", "6.0:0", "6.0:1", "6.0:1", "6.1:0", "6.1:0", "6.1:1", "6.1:1"]
    assert [g.label for g in graded] == ["6.0:0", "6.0:1", "6.1:0", "6.1:1"]
    assert [g.as_dict()["group"] for g in graded] == [g.label for g in graded]
