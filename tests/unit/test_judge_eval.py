"""``whileai.grading.evaluate`` (a grader against a known reference) and the reference ``whileai simulate`` writes:
the tau against the reference as a property, the reader's checks, a judge's cost counted over the first grading
only, and the seeded agent's flaws checked against its own transcripts."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from whileai.errors import BadInput
from whileai.grading.evaluate import ReferenceGroup, evaluate_grader, read_reference, reference_tau
from whileai.grading.groupwise import GroupwiseGrading
from whileai.http.endpoint import EndpointStats
from whileai.simulations.agents import FLAWS, rollout_quality, seeded_agent
from whileai.simulations.rollouts import simulate
from whileai.stats import quantile

# ---------------------------------------------------------------------------------------------- the tau


distinct = st.lists(st.integers(-50, 50), min_size=2, max_size=8, unique=True)


@given(distinct)
def test_the_reference_s_own_order_is_1_and_its_reverse_minus_1(values: list[int]) -> None:
    reference = [float(v) for v in values]
    scores = dict(enumerate(reference))
    none = [False] * len(values)
    assert reference_tau(scores, reference, none) == 1.0
    assert reference_tau({i: -s for i, s in scores.items()}, reference, none) == -1.0
    # Only the order counts: any increasing map of the scores gives the same tau.
    assert reference_tau({i: 3 * s**3 + 1 for i, s in scores.items()}, reference, none) == 1.0


@given(st.lists(st.integers(0, 3), min_size=2, max_size=8), st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_the_tau_lies_in_minus_1_to_1_and_is_none_only_without_an_order(values: list[int], scores: list[int]) -> None:
    reference = [float(v) for v in values]
    tau = reference_tau({i: float(scores[i]) for i in range(len(values))}, reference, [False] * len(values))
    if len(set(values)) < 2:
        assert tau is None
    else:
        assert tau is not None and -1.0 <= tau <= 1.0


@given(distinct, st.data())
def test_a_reference_hack_is_the_lowest_whatever_quality_it_claims(values: list[int], data) -> None:
    hack = data.draw(st.integers(0, len(values) - 1))
    hacks = [i == hack for i in range(len(values))]
    reference = [float(v) for v in values]
    # The grader that scores the hack lowest and the others in the reference's order agrees on every pair.
    scores = {i: -1000.0 if hacks[i] else reference[i] for i in range(len(values))}
    assert reference_tau(scores, reference, hacks) == 1.0


def test_a_member_without_a_reference_is_left_out() -> None:
    assert reference_tau({0: 1.0, 1: 0.5, 2: 0.9}, [2.0, 1.0, None], [False] * 3) == 1.0
    assert reference_tau({0: 1.0, 1: 0.5}, [2.0, None], [False] * 2) is None


# ---------------------------------------------------------------------------------------------- the reader


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_rank_is_read_as_a_quality_higher_is_better(tmp_path: Path) -> None:
    rows = [
        {"scenario_id": "a", "reward": 1, "final_text": "x", "reference_rank": 1, "hack": False},
        {"scenario_id": "b", "reward": 1, "final_text": "y", "reference_rank": 2},
        {"scenario_id": "a", "reward": 0, "final_text": "z"},
        {"scenario_id": "a", "reward": 1, "final_text": "w", "reference_rank": 3, "hack": True},
    ]
    groups = read_reference(_write(tmp_path / "r.jsonl", rows))
    assert [g.task_id for g in groups] == ["a", "b"]  # grouped by id, in order of first appearance
    assert groups[0].reference == [-1.0, None, -3.0] and groups[0].hacks == [False, False, True]
    assert [m[2] for m in groups[0].members] == ["x", "z", "w"]


def test_a_folder_s_groups_are_named_by_their_file(tmp_path: Path) -> None:
    (tmp_path / "rows").mkdir()
    row = {"scenario_id": "s", "reward": 1, "final_text": "x", "quality": 1}
    for name in ("a", "b"):
        _write(tmp_path / "rows" / f"{name}.jsonl", [row])
    assert [g.task_id for g in read_reference(tmp_path / "rows")] == ["a.jsonl:s", "b.jsonl:s"]


def test_a_json_file_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"scenario_id": "a", "reward": 1, "final_text": "x", "quality": [1]}]))
    with pytest.raises(BadInput, match=r"rows\.json row 0: field 'quality' is not a finite number"):
        read_reference(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"quality": float("nan")}, "field 'quality' is not a finite number"),
        ({"reference_rank": 1.5}, "field 'reference_rank' must be a whole number >= 1"),
        ({"reference_rank": True}, "field 'reference_rank' is not a finite number"),
        ({"quality": 1, "reference_rank": 1}, "give 'quality' or 'reference_rank', not both"),
        ({"quality": 1, "hack": 1}, "field 'hack' must be true or false"),
        ({"quality": 1, "final_text": None}, "field 'final_text' is not text"),
    ],
)
def test_a_bad_row_names_its_line_and_field(tmp_path: Path, row: dict, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = {"scenario_id": "a", "reward": 1, "final_text": "x"}
    path.write_text(json.dumps({**good, "quality": 1}) + "\n\n" + json.dumps({**good, **row}, allow_nan=True) + "\n")
    with pytest.raises(BadInput, match=re.escape(f"{path} line 3: {message}")):
        read_reference(path)


# ---------------------------------------------------------------------------------------------- the figures


class CountingJudge:
    """A judge-like grader with HTTP-style counters: each group is one call of 10 tokens in and 2 out, answered in
    0.1 s more than the one before; it ranks the shortest pass first."""

    def __init__(self) -> None:
        self.stats = EndpointStats()
        self.__name__ = "counting"

    def __call__(self, group):
        raise AssertionError("the batch method is used")

    def grade_groups(self, groups):
        answers = []
        for group in groups:
            self.stats.count_call(retry=False)
            self.stats.count_answer(0.1 * (len(self.stats.latencies) + 1), 10, 2)
            passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
            answers.append({"ranking": [g["index"] for g in passes]})
        return answers


def _groups(n: int) -> list[ReferenceGroup]:
    members = [(1.0, "p", "a"), (1.0, "p", "bb"), (1.0, "p", "ccc"), (0.0, "p", "no")]
    return [ReferenceGroup(f"t{g}", members, [3.0, 2.0, 1.0, None], [False] * 4) for g in range(n)]


def test_a_judge_s_cost_is_the_first_grading_s_in_batches_of_64() -> None:
    judge = CountingJudge()
    done: list[int] = []
    report = evaluate_grader(GroupwiseGrading(judge), _groups(130), progress=done.append)
    assert done == [64, 64, 2]
    assert judge.stats.calls == 260  # every group was shown twice
    assert (report.calls, report.tokens_in, report.tokens_out) == (130, 1300, 260)
    # The first grading's answers are the 1st-64th, 129th-192nd and 257th-258th of the judge's.
    first = judge.stats.latencies[:64] + judge.stats.latencies[128:192] + judge.stats.latencies[256:258]
    cost = report.as_dict()["cost"]
    assert cost["latency_p50_s"] == quantile(first, 0.5) and cost["latency_p95_s"] == quantile(first, 0.95)
    assert report.tau == 1.0 and report.interval == (1.0, 1.0) and report.self_agreement == 1.0
    assert report.as_dict()["grader"]["judge"]["calls"] == 260
    assert "cost per group: 1.00 calls, 10 tokens in / 2 out" in str(report)


def test_groups_without_a_pass_are_left_out_and_one_group_has_no_interval() -> None:
    fails = ReferenceGroup("f", [(0.0, "p", "a"), (0.0, "p", "b")], [1.0, 2.0], [False, False])
    report = evaluate_grader(GroupwiseGrading(CountingJudge()), [fails, *_groups(1)])
    assert (report.groups, report.skipped, len(report.taus), report.interval) == (1, 1, 1, None)
    assert report.as_dict()["reference_tau"] == {"mean": 1.0, "low": None, "high": None, "groups": 1}
    assert "one group the reference orders: too few to judge the order" in report.verdict


# ---------------------------------------------------------------------------------------------- simulate's reference


ACTIONS = {"refund_order", "cancel_order", "change_address"}
CALL = re.compile(r"^<tool_call>(\w+) (.*)</tool_call>$")
RESULT = re.compile(r"^<tool_result>(.*)</tool_result>$")


def _events(text: str) -> list[tuple[str, str | None, object]]:
    events: list[tuple[str, str | None, object]] = []
    for line in text.splitlines():
        if match := CALL.match(line):
            events.append(("call", match.group(1), json.loads(match.group(2))))
        elif match := RESULT.match(line):
            events.append(("result", None, json.loads(match.group(1))))
        else:
            events.append(("text", None, line))
    return events


@pytest.fixture(scope="module")
def simulated() -> list[dict]:
    return simulate("builtin:all", seeded_agent(seed=0), n=8, seed=0, reference=True)


def test_the_rows_carry_the_reference_only_when_asked(simulated) -> None:
    plain = simulate("builtin:all", seeded_agent(seed=0), n=8, seed=0)
    assert [{k: v for k, v in r.items() if k not in ("flaws", "quality", "hack")} for r in simulated] == plain
    for row in simulated:
        assert set(row["flaws"]) <= set(FLAWS) and len(set(row["flaws"])) == len(row["flaws"])
        assert row["quality"] == rollout_quality(row["flaws"], row["passed"])
        assert row["hack"] == (row["passed"] and "invented_id" in row["flaws"])
    assert sum(r["hack"] for r in simulated) > 0
    assert {r["quality"] for r in simulated if r["passed"] and not r["hack"]} >= {1.0, 0.9, 0.8, 0.7}


def test_each_flaw_of_a_pass_is_what_its_transcript_shows(simulated) -> None:
    """The flaws read back from the transcript alone, on every pass: a hack acted on an id that neither the customer
    nor any tool had given; no_lookup acted on an id not looked up before; no_verification looked nothing up after;
    failed_call had an action refused before; repeated_call made one call twice in a row."""
    for row in (r for r in simulated if r["passed"]):
        events, flaws = _events(row["final_text"]), set(row["flaws"])
        calls = [e for e in events if e[0] == "call"]
        assert any(a == b for a, b in itertools.pairwise(calls)) == ("repeated_call" in flaws), row
        acted = [
            (i, e) for i, e in enumerate(events) if e[0] == "call" and e[1] in ACTIONS and "ok" in events[i + 1][2]
        ]
        if not acted:  # a question answered: only a repeated lookup can be a flaw
            assert flaws <= {"repeated_call"}, row
            continue
        at, (_, _, arguments) = acted[0]
        order_id = arguments["order_id"]
        seen = row["prompt"] + " ".join(json.dumps(e[2]) for e in events[:at] if e[0] != "call")
        assert (order_id not in seen) == row["hack"], row
        looked = any(e[1] == "lookup_order" and e[2]["order_id"] == order_id for e in events[:at])
        assert looked == ("no_lookup" not in flaws), row
        assert any(e[1] == "lookup_order" for e in events[at:]) == ("no_verification" not in flaws), row
        refused = any(e[1] in ACTIONS and "error" in events[j + 1][2] for j, e in enumerate(events[:at]))
        assert refused == ("failed_call" in flaws), row


def test_a_careful_agent_has_no_flaws_and_an_inventing_one_hacks() -> None:
    careful = seeded_agent(
        seed=0, look_up_first=1, verify=1, repeat_call=0, give_up=0, skip_action=0, invent_id=0, wrong_order=0
    )
    passes = [r for r in simulate("builtin:refunds", careful, n=2, seed=0, reference=True) if r["passed"]]
    assert passes and all(r["flaws"] == [] and r["quality"] == 1.0 and not r["hack"] for r in passes)
    inventing = seeded_agent(seed=0, invent_id=1, ask_customer=0, look_up_first=0, verify=1, give_up=0, skip_action=0)
    rows = simulate("builtin:refunds", inventing, n=2, seed=0, reference=True)
    hacks = [r for r in rows if r["hack"]]
    assert hacks and all(r["passed"] and r["quality"] == 0.0 and "invented_id" in r["flaws"] for r in hacks)
