"""The API key appears in no exception, log record, stats, report, cache or rubrics file, even when a server
echoes it back."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from whileai import GroupwiseGrading
from whileai.errors import GraderUnavailable

KEY_ENV = "WHILEAI_TEST_JUDGE_KEY"
KEY = "sk-test-s3cr3t-9f8e7d6c5b4a3210"


def test_the_api_key_leaks_nowhere(make_judge, judge_server, judge_tools, tmp_path, caplog, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    caplog.set_level(logging.DEBUG)  # every logger, aiohttp's and asyncio's included
    seen: list[str] = []

    judge = make_judge("grader", api_key_env=KEY_ENV, max_retries=1)
    gar = GroupwiseGrading(grader=judge)
    rows = [{"scenario_id": "s", "reward": 1, "final_text": t} for t in ("<tool_call>a</tool_call>", "b")]
    seen.append(str(gar.check_spread(rows, strict=False)))
    assert judge_server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # the key is used...

    # ...and a hostile server echoes it in an error body and in a reply.
    judge_server.push(
        *[judge_tools.Status(500, body={"error": {"message": f"bad key {KEY}"}})] * 2,
        judge_tools.Reply(f"I refuse. Your key is {KEY}"),
    )
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0] * 2, num_generations=3)
    reward(prompts=["p"] * 3 + ["q"] * 3, completions=["x", "y", "z", "u", "v", "w"])
    answers = judge.grade_groups(
        [[{"index": 0, "prompt": "p", "completion": f"c{n}", "reward": 1.0, "passed": True}] for n in range(2)]
    )
    seen += [str(a) for a in answers] + [repr(a) for a in answers]

    # Reward mode with a stored rubric, then an endpoint that refuses connections.
    rubrics = tmp_path / "rubrics.json"
    grs = make_judge("grading", grading={"mode": "reward"}, rubrics_path=rubrics, api_key_env=KEY_ENV)
    grs.shape([1, 0], ["p", "p"], ["<tool_call>a</tool_call> done", "no"], group_size=2, task_id="t")
    closed = make_judge(
        "grader", api_key_env=KEY_ENV, base_url=judge_tools.closed_port_url(), max_retries=1, no_cache=True
    )
    with pytest.raises(GraderUnavailable) as caught:
        GroupwiseGrading(grader=closed).check_spread(rows)
    seen += [str(caught.value), repr(caught.value)]

    for grading in (gar, grs):
        seen.append(json.dumps(grading.stats.as_dict()))
        seen.append(json.dumps(grading.grader.stats.as_dict()) + str(grading.grader.stats))
        seen.append(repr(grading) + repr(grading.grader) + repr(grading.grader.config))
        seen.append(grading.grader.config.model_dump_json())
    seen.append(caplog.text)
    seen += [r.getMessage() for r in caplog.records]
    assert any("judge call" in text or "retry" in text for text in seen)  # the failures did get logged
    assert "[secret hidden]" in " ".join(seen)  # the echoes were masked, not dropped

    blobs = [p.read_bytes() for p in Path(judge.config.cache_dir).glob("*")] + [rubrics.read_bytes()]
    assert len(blobs) >= 2 and sum(len(b) for b in blobs) > 0
    for text in seen:
        assert KEY not in text
    for blob in blobs:
        assert KEY.encode() not in blob


def test_a_missing_key_variable_is_named_not_guessed(make_judge, monkeypatch) -> None:
    from whileai.errors import BadInput

    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(BadInput, match=KEY_ENV):
        make_judge("grader", api_key_env=KEY_ENV)
