"""The score form's answer shapes, declared in a prompt file: the per-pass layout (each pass's reason, then its own
score), the top of the scale, number labels; a prompt file that extends another; and judge-eval's word on a judge
that ties most groups.

Against the scripted judge server (``judge_server``), whose judge answers in the layout the schema asks for (10 less
a rollout's tool calls).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from whileai.errors import BadInput
from whileai.judge.prompts import load_prompts
from whileai.judge.replies import JudgeAnswerError, check_scores, read_scores, scores_schema

# The per-pass variant the judge-vs-RULER benchmark measured: a prompt file, not a built-in version.
V3 = str(Path(__file__).resolve().parents[2] / "benchmarks" / "judge_variants" / "per_pass_hacks.yaml")

GROUP = [
    {"index": 0, "prompt": "p", "completion": "<tool_call>a</tool_call> done", "reward": 1.0, "passed": True},
    {"index": 1, "prompt": "p", "completion": "<tool_call>a</tool_call>" * 3 + " done", "reward": 1.0, "passed": True},
    {"index": 2, "prompt": "p", "completion": "<tool_call>b</tool_call> done", "reward": 1.0, "passed": True},
    {"index": 3, "prompt": "p", "completion": "no", "reward": 0.0, "passed": False},
]


def sent_schema(body: dict) -> dict:
    form = body["response_format"]
    return form["json_schema"]["schema"] if form["type"] == "json_schema" else form["schema"]


def test_the_per_pass_schema_puts_each_reason_right_before_its_own_score() -> None:
    schema = scores_schema(["A", "C"], "per_pass", 100)
    assert list(schema["properties"]) == ["passes", "hacks"] and schema["additionalProperties"] is False
    passes = schema["properties"]["passes"]
    assert passes["required"] == ["A", "C"] and passes["additionalProperties"] is False
    one = passes["properties"]["A"]
    assert list(one["properties"]) == ["reason", "score"] and one["required"] == ["reason", "score"]
    assert one["properties"]["score"] == {"type": "integer", "minimum": 0, "maximum": 100}


def test_a_per_pass_reply_is_read_into_the_same_tiers_as_a_grouped_one() -> None:
    per_pass = {"passes": {"a": {"reason": "one call", "score": 9}, "B": {"reason": "two", "score": 6}}, "hacks": []}
    grouped = {"reasons": {"a": "one call", "B": "two"}, "scores": {"a": 9, "B": 6}, "hacks": []}
    first = check_scores(read_scores(json.dumps(per_pass), "per_pass"), ["A", "B"], ["C"])
    second = check_scores(read_scores(json.dumps(grouped)), ["A", "B"], ["C"])
    assert first == second and first.tiers == [["A"], ["B"]] and first.reasons == {"A": "one call", "B": "two"}


@pytest.mark.parametrize(
    ("reply", "layout", "top", "message"),
    [
        ({"passes": {"A": {"reason": "r", "score": 5}}}, "per_pass", 10, "leave out pass 'B'"),
        ({"passes": {"A": {"score": 5}, "B": {"score": 101}}}, "per_pass", 100, "'B' 101, above the top"),
        ({"passes": {"A": {"score": 5}, "Z": {"score": 5}, "B": {"score": 1}}}, "per_pass", 10, "'Z', which was not"),
        ({"scores": {"A": 5, "B": 5}}, "per_pass", 10, "bad passes"),  # the grouped shape where per-pass was asked
        ({"passes": {"A": {"reason": "r"}, "B": {"score": 1}}}, "per_pass", 10, "bad passes.A.score"),
    ],
)
def test_a_per_pass_reply_that_cannot_be_used_names_why(reply, layout, top, message) -> None:
    with pytest.raises(JudgeAnswerError, match=re.escape(message)):
        check_scores(read_scores(json.dumps(reply), layout), ["A", "B"], ["C"], top)


def test_the_per_pass_variant_asks_pass_by_pass_and_takes_v2_s_other_templates() -> None:
    v2, v3 = load_prompts("v2"), load_prompts(V3)
    assert v3.answer.layout == "per_pass" and v3.answer.top == 10 and v3.answer.labels == "letters"
    assert (v3.rank, v3.rubric, v3.score, v3.system) == (v2.rank, v2.rubric, v2.score, v2.system)
    assert v3.rate != v2.rate and '"passes"' in v3.rate and v3.rate.index('"reason"') < v3.rate.index('"score"')
    assert v3.digest != v2.digest


def test_the_judge_asks_for_and_reads_the_per_pass_layout(make_judge, judge_server) -> None:
    answer = make_judge("grader", answer_form="scores", prompts=V3)(GROUP)
    schema = sent_schema(judge_server.requests[0]["body"])
    assert list(schema["properties"]) == ["passes", "hacks"]
    # 10 less the tool calls: members 0 and 2 (one call each) tie at the top, member 1 (three) below.
    assert answer["ranking"] == [[0, 2], [1]] and answer["hacks"] == []


def test_number_labels_and_a_finer_scale_reach_the_judge(make_judge, judge_server, tmp_path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(f"version: mine\nextends: {V3}\nanswer:\n  layout: per_pass\n  top: 100\n  labels: numbers\n")
    answer = make_judge("grader", answer_form="scores", prompts=str(path))(GROUP)
    body = judge_server.requests[0]["body"]
    assert re.findall(r'<rollout label="(\w+)"', body["messages"][1]["content"]) == ["1", "2", "3", "4"]
    passes = sent_schema(body)["properties"]["passes"]
    assert passes["properties"]["1"]["properties"]["score"]["maximum"] == 100
    assert answer["ranking"] == [[0, 2], [1]]


def test_a_changed_answer_shape_is_a_new_cache_key(make_judge, judge_server, tmp_path) -> None:
    make_judge("grader", answer_form="scores", prompts=V3)(GROUP)
    same_texts = tmp_path / "wider.yaml"
    same_texts.write_text(f"version: v3\nextends: {V3}\nanswer:\n  layout: per_pass\n  top: 20\n")
    make_judge("grader", answer_form="scores", prompts=str(same_texts))(GROUP)
    assert judge_server.calls == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: x\nextends: 7\n", "extends: a built-in version or a file's path"),
        ("version: x\nextends: v99\n", "no built-in version 'v99'"),
        (f"version: x\nextends: {V3}\nanswer:\n  layout: sideways\n", "answer.layout"),
        (f"version: x\nextends: {V3}\nanswer:\n  top: 0\n", "answer.top"),
        (f"version: x\nextends: {V3}\nanswer:\n  colour: red\n", "answer.colour"),
    ],
)
def test_a_bad_extends_or_answer_section_is_named(tmp_path, text, message) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(BadInput, match=re.escape(message)):
        load_prompts(str(path))


def test_a_file_extends_one_beside_it_and_a_loop_is_refused(tmp_path) -> None:
    (tmp_path / "base.yaml").write_text("version: base\nextends: v2\nanswer:\n  top: 20\n")
    (tmp_path / "top.yaml").write_text("version: top\nextends: base.yaml\n")
    loaded = load_prompts(str(tmp_path / "top.yaml"))
    assert loaded.version == "top" and loaded.answer.top == 20 and loaded.rank == load_prompts("v2").rank
    (tmp_path / "a.yaml").write_text("version: a\nextends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("version: b\nextends: a.yaml\n")
    with pytest.raises(BadInput, match="extends it back"):
        load_prompts(str(tmp_path / "a.yaml"))


def test_judge_eval_says_when_a_judge_ties_most_groups() -> None:
    from whileai.grading.evaluate import ReferenceGroup, evaluate_grader
    from whileai.grading.groupwise import GroupwiseGrading

    def all_equal(group):
        return {"ranking": [[g["index"] for g in group if g["passed"]]]}

    members = [(1.0, "p", "a"), (1.0, "p", "bb"), (0.0, "p", "no")]
    groups = [ReferenceGroup(f"t{n}", members, [2.0, 1.0, None], [False] * 3) for n in range(3)]
    report = evaluate_grader(GroupwiseGrading(all_equal), groups)
    assert (report.tied_groups, report.multi_pass_groups) == (3, 3)
    assert "ties every pass in 3 of 3 groups" in report.verdict
    assert report.as_dict()["tied_groups"] == {"tied": 3, "groups": 3}
    assert any(line.startswith("ties: every pass given the same score in 3 of 3") for line in report.lines)

    def shortest(group):
        passes = [g["index"] for g in group if g["passed"]]
        return {"ranking": sorted(passes, key=lambda i: len(group[i]["completion"]))}

    assert "ties every pass" not in evaluate_grader(GroupwiseGrading(shortest), groups).verdict


def test_prompts_without_hacks_send_no_list_and_ignore_any_named(make_judge, judge_server, tmp_path) -> None:
    path = tmp_path / "no_hacks.yaml"
    path.write_text(f"version: no-hacks\nextends: {V3}\nanswer:\n  layout: per_pass\n  hacks: false\n")
    group = [*GROUP[:3], {**GROUP[0], "index": 3, "completion": "<tool_call>a</tool_call> refunded ORD-9999"}]
    with_hacks = make_judge("grader", answer_form="scores", prompts=V3)(group)
    assert with_hacks["hacks"] == [3]  # the scripted judge names ORD-9999 a hack
    answer = make_judge("grader", answer_form="scores", prompts=str(path))(group)
    assert "hacks" not in sent_schema(judge_server.requests[-1]["body"])["properties"]
    assert answer["hacks"] == [] and answer["ranking"] == [[0, 2, 3], [1]]


def test_the_default_shape_keeps_a_version_s_digest_so_its_cached_answers_stay_valid() -> None:
    import hashlib

    v2 = load_prompts("v2")
    texts = (v2.version, v2.system, v2.rank, v2.rubric, v2.score, v2.rate or "")
    assert v2.digest == hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    assert load_prompts(V3).digest != v2.digest


def test_the_shipped_v3_is_the_variant_the_benchmark_measured() -> None:
    shipped = load_prompts("v3")
    measured = load_prompts(str(Path(V3).with_name("v3_no_hacks.yaml")))
    assert (shipped.rate, shipped.answer, shipped.rank, shipped.score) == (
        measured.rate, measured.answer, measured.rank, measured.score,
    )  # fmt: skip
    assert shipped.answer.layout == "per_pass" and shipped.answer.hacks is False
    assert load_prompts("v2").answer.hacks is True  # the default keeps its list of hacks
