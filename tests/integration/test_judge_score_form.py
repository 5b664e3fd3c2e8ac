"""The score answer form: a schema a grammar can enforce, scores read into the same tiers a ranking gives; prompts
with nothing to copy; a cache key that covers the whole request; a recipe's bare on/off; controls asked afresh.

Against the scripted judge server (``judge_server``), whose automatic judge answers in the form the request asks
for (fewest tool calls best).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from whileai import GroupwiseGrading
from whileai.errors import BadInput
from whileai.judge import JudgeConfig
from whileai.judge.prompts import load_prompts
from whileai.judge.replies import JudgeAnswerError, ScoresReply, check_scores, scores_schema

REPO = Path(__file__).resolve().parents[2]

GROUP = [
    {"index": 0, "prompt": "p", "completion": "<tool_call>a</tool_call> done", "reward": 1.0, "passed": True},
    {"index": 1, "prompt": "p", "completion": "<tool_call>a</tool_call>" * 3 + " done", "reward": 1.0, "passed": True},
    {"index": 2, "prompt": "p", "completion": "<tool_call>b</tool_call> done", "reward": 1.0, "passed": True},
    {"index": 3, "prompt": "p", "completion": "no", "reward": 0.0, "passed": False},
]


def sent_schema(body: dict) -> dict:
    form = body["response_format"]
    return form["json_schema"]["schema"] if form["type"] == "json_schema" else form["schema"]


def test_the_score_form_sends_a_schema_with_every_pass_a_required_bounded_key(make_judge, judge_server) -> None:
    answer = make_judge("grader", answer_form="scores")(GROUP)
    body = judge_server.requests[0]["body"]
    schema = sent_schema(body)
    shown = re.findall(r'<rollout label="([A-Z])" verdict="pass">', body["messages"][1]["content"])
    assert list(schema["properties"]) == ["reasons", "scores", "hacks"]  # what each did, then the verdict
    scores = schema["properties"]["scores"]
    assert scores["required"] == shown and scores["additionalProperties"] is False
    assert {json.dumps(v, sort_keys=True) for v in scores["properties"].values()} == {
        json.dumps({"type": "integer", "minimum": 0, "maximum": 10}, sort_keys=True)
    }
    assert schema["properties"]["reasons"]["required"] == shown and schema["additionalProperties"] is False
    # Equal tool calls are equal scores, a tie: members 0 and 2 share the top tier, 1 is below.
    assert answer["ranking"] == [[0, 2], [1]] and answer["hacks"] == []


def test_scores_and_a_ranking_of_the_same_judgement_give_the_same_factors(make_judge, judge_server, page_rows) -> None:
    by_scores = GroupwiseGrading(grader=make_judge("grader", answer_form="scores")).check_spread(page_rows)
    by_ranking = GroupwiseGrading(grader=make_judge("grader", answer_form="ranking")).check_spread(page_rows)
    assert by_scores.per_group == by_ranking.per_group and by_scores.hacks == by_ranking.hacks


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ({"scores": {"A": 5}}, "leave out pass 'B'"),
        ({"scores": {"A": 5, "B": 5, "Q": 1}}, "'Q', which was not shown"),
        ({"scores": {"A": 5, "B": 5}, "hacks": ["C"]}, "'C', a failing rollout"),
        ({"scores": {"A": 11, "B": 5}}, "'A' 11, above the top of the scale (10)"),
        ({"scores": {"A": -1, "B": 5}}, None),  # below 0: pydantic refuses it
    ],
)
def test_a_score_reply_that_cannot_be_used_names_why(reply, error) -> None:
    from whileai.judge.replies import read_reply

    with pytest.raises(JudgeAnswerError, match=re.escape(error) if error else "bad scores"):
        check_scores(read_reply(json.dumps(reply), ScoresReply), ["A", "B"], ["C"])


def test_scores_of_failures_are_ignored_and_a_hack_leaves_the_tiers() -> None:
    reply = ScoresReply(scores={"a": 3, "B": 8, "C": 10}, hacks=["a"])
    checked = check_scores(reply, ["A", "B"], ["C"])
    assert checked.tiers == [["B"]] and checked.hacks == ["A"]
    assert scores_schema(["A", "B"])["properties"]["hacks"]["items"]["enum"] == ["A", "B"]


def test_v1_prompts_refuse_the_score_form_naming_the_fix(judge_config) -> None:
    from whileai.judge import JudgeGrader

    with pytest.raises(BadInput, match="answer_form: ranking"):
        JudgeGrader(judge_config.model_copy(update={"prompts": "v1", "answer_form": "scores"}))


def test_v2_prompts_show_no_example_value_or_shape_and_ask_for_reasons_first() -> None:
    prompts = load_prompts("v2")
    for which in ("system", "rate", "rank", "rubric", "score"):
        text = getattr(prompts, which)
        assert "{" not in text and "[" not in text, which  # no JSON example to copy
        assert not re.search(r"\b0\.\d", text), which  # no example score
        assert "one line" not in text and "..." not in text, which
    for which in ("rate", "rank"):
        text = getattr(prompts, which)
        assert text.index('"reasons"') < text.index('"hacks"')
    assert prompts.rate is not None and prompts.rate.index('"reasons"') < prompts.rate.index('"scores"')
    assert load_prompts("v1").rate is None


def test_the_cache_key_covers_everything_that_changes_the_request(make_judge, judge_server) -> None:
    make_judge("grader")(GROUP)
    make_judge("grader")(GROUP)
    assert judge_server.calls == 1
    for number, change in enumerate(
        [
            {"structured_output": "off"},
            {"temperature": 0.7},
            {"max_tokens": 512},
            {"extra_body": {"top_k": 1}},
            {"answer_form": "scores"},
        ],
        start=2,
    ):
        make_judge("grader", **change)(GROUP)
        assert judge_server.calls == number, change
    make_judge("grader", stream=False, timeout_s=9.0, max_retries=0)(GROUP)  # how it travels: the same answer
    assert judge_server.calls == 6


@pytest.mark.parametrize(("written", "read"), [("off", "off"), ("on", "on"), ("no", "off"), ("true", "on")])
def test_a_recipe_s_bare_on_and_off_are_read_as_the_docs_write_them(written, read) -> None:
    from whileai.config import load_recipe

    loaded = load_recipe(REPO / "recipes" / "refund_judge.yaml", [f"grader.judge.structured_output={written}"])
    assert loaded.recipe.grader.judge.structured_output == read
    assert JudgeConfig(model="m", structured_output=yaml.safe_load(written)).structured_output == read


def test_reward_mode_controls_are_asked_again_not_read_from_the_cache(make_judge, judge_server, page_rows) -> None:
    grading = make_judge("grading", grading={"mode": "reward"})
    report = grading.check_spread(page_rows, strict=False, controls=8)
    scores = [r for r in judge_server.requests if r["body"]["messages"][1]["content"].count("<rubric>")]
    passes = sum(len(v) for v in report.per_group.values())
    # Every pass scored once for the check, and each control's passes (its copy included) scored again.
    assert len(scores) > passes and grading.grader.stats.as_dict()["cache_hits"] == 0
    assert report.controls is not None
