"""What the judge does when the server misbehaves: every failure is a counted fallback, never an exception in TRL.

Malformed, fenced and wrongly labelled answers, scores out of range, 429 with Retry-After, 500, a 200 that is no chat
completion (empty, cut, an HTML page, no choices, an empty message), answers slower than the timeout, the batch
deadline, and a port nothing listens on. A server without structured output: test_judge_structured.py.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from whileai import GroupwiseGrading
from whileai.errors import GraderUnavailable
from whileai.judge import JudgeAnswerError, JudgeCallError


def group(passes: int = 2, failures: int = 1, tag: str = "") -> list[dict]:
    items = [
        {"index": i, "prompt": "refund ORD-1", "completion": f"pass {i} {tag}", "reward": 1.0, "passed": True}
        for i in range(passes)
    ]
    items += [
        {"index": passes + j, "prompt": "refund ORD-1", "completion": f"fail {j} {tag}", "reward": 0.0, "passed": False}
        for j in range(failures)
    ]
    return items


def labels(judge_tools, body, passed: bool) -> list[str]:
    return [label for label, ok, _ in judge_tools.shown_rollouts(body) if ok is passed]


def test_fenced_json_and_prose_are_read(make_judge, judge_server, judge_tools) -> None:
    def fenced(body):
        answer = json.dumps(judge_tools.auto_answer(body))
        return judge_tools.Reply(f"<think>hmm</think>Here is my ranking:\n```json\n{answer}\n```\nThanks.")

    judge_server.push(fenced)
    judge = make_judge("grader", structured_output="off")
    answer = judge(group())
    assert sorted(i for tier in answer["ranking"] for i in tier) == [0, 1]
    assert "response_format" not in judge_server.requests[0]["body"]


def _invented(tools, body):
    return {"ranking": [*labels(tools, body, True), "Q"], "hacks": []}


def _repeated(tools, body):
    passes = labels(tools, body, True)
    return {"ranking": [passes[0], *passes], "hacks": []}


def _ranks_failure(tools, body):
    return {"ranking": labels(tools, body, True) + labels(tools, body, False), "hacks": []}


def _omits_pass(tools, body):
    return {"ranking": labels(tools, body, True)[:1], "hacks": []}


def _hack_is_failure(tools, body):
    return {"ranking": labels(tools, body, True), "hacks": labels(tools, body, False)}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda tools, body: "not json at all", "not JSON"),
        (lambda tools, body: '{"ranking": ["A"', "not JSON"),
        (lambda tools, body: {"ranking": "A B"}, "bad ranking"),
        (_invented, "invented"),
        (_repeated, "twice"),
        (_ranks_failure, "failing rollout"),
        (_omits_pass, "leaves out pass"),
        (_hack_is_failure, "failing rollout"),
    ],
    ids=[
        "prose",
        "truncated",
        "wrong-type",
        "invented-label",
        "repeated-label",
        "ranks-failure",
        "omits-pass",
        "hack-fail",
    ],
)
def test_unusable_answers_fall_back_with_their_reason(make_judge, judge_server, judge_tools, build, message) -> None:
    judge_server.push(lambda body: judge_tools.Reply(build(judge_tools, body)))
    judge = make_judge("grader")
    gar = GroupwiseGrading(grader=judge)
    graded = gar.grade_group([1.0, 1.0, 0.0], ["p"] * 3, ["pass 0", "pass 1", "fail 0"])
    assert graded.reason is not None and graded.reason.startswith("grader raised: JudgeAnswerError")
    assert message in graded.reason
    assert graded.shaped == [1.0, 1.0, 0.0]  # the original rewards
    assert judge.stats.failures == {"unusable answer": 1}
    assert judge_server.calls == 1  # an unusable answer is not retried...
    judge_server.push(lambda body: judge_tools.Reply(build(judge_tools, body)))
    gar.grade_group([1.0, 1.0, 0.0], ["p"] * 3, ["pass 0", "pass 1", "fail 0"])
    assert judge_server.calls == 2  # ...nor cached


def test_scores_out_of_range_fall_back(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(judge_tools.Reply({"solution": 1.5, "behavior": 0.5, "reason": "x"}))
    scorer = make_judge("scorer")
    grs = GroupwiseGrading(grader=scorer, mode="reward", rubrics={"t": {"solution": ["a"], "behavior": ["b"]}})
    graded = grs.grade_group([1.0, 0.0], ["p"] * 2, ["done", "no"], task_id="t")
    assert graded.reason is not None and "solution" in graded.reason and "less than or equal to 1" in graded.reason
    assert graded.shaped == [1.0, 0.0]
    with pytest.raises(JudgeAnswerError):
        judge_server.push(judge_tools.Reply({"solution": "0.5", "behavior": 0.5, "reason": "x"}))
        scorer({"index": 0, "prompt": "p", "completion": "other", "reward": 1.0, "passed": True}, ["a"])


def test_429_honours_retry_after_up_to_the_longest_backoff(make_judge, judge_server, judge_tools, caplog) -> None:
    caplog.set_level(logging.INFO, logger="whileai")
    judge_server.push(judge_tools.Status(429, headers={"Retry-After": "1"}))
    judge = make_judge("grader", backoff_max_s=2.0)
    assert judge(group())["ranking"]
    first, second = (r["time"] for r in judge_server.requests)
    assert second - first >= 0.9  # backoff alone would have waited at most 0.05 s
    assert judge.stats.as_dict()["retries"] == 1
    # a Retry-After above backoff_max_s waits backoff_max_s, and the log line says both
    judge_server.push(judge_tools.Status(429, headers={"Retry-After": "30"}))
    capped = make_judge("grader", backoff_max_s=0.2)
    started = time.monotonic()
    assert capped(group(tag="capped"))["ranking"]
    assert time.monotonic() - started < 10
    assert any("the server asked for 30s (backoff_max_s caps it)" in r.getMessage() for r in caplog.records)


def test_500_is_retried_then_answered(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(judge_tools.Status(500), judge_tools.Status(502))
    judge = make_judge("grader")
    assert judge(group())["ranking"]
    assert judge_server.calls == 3
    assert judge.stats.as_dict()["retries"] == 2


@pytest.mark.parametrize(
    ("status", "message"), [(400, "prompt is too long"), (401, "invalid api key"), (404, "model not found")]
)
def test_a_client_error_is_not_retried(make_judge, judge_server, judge_tools, status, message) -> None:
    judge_server.push(judge_tools.Status(status, body={"error": {"message": message}}))
    judge = make_judge("grader", structured_output="off")
    answers = judge.grade_groups([group(tag="a"), group(tag="b")])
    assert judge_server.calls == 2  # one call per group: the refused one was not sent again
    errors = [a for a in answers if isinstance(a, JudgeCallError)]
    assert len(errors) == 1 and f"HTTP {status}" in str(errors[0]) and message in str(errors[0])
    assert judge.stats.failures == {f"http {status}": 1}


def test_persistent_5xx_in_training_falls_back_and_in_preflight_stops(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(*[judge_tools.Status(503)] * 3)
    gar = GroupwiseGrading(grader=make_judge("grader"))
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0], num_generations=3)
    assert reward(prompts=["p"] * 3, completions=["a", "b", "c"]) == [1.0, 1.0, 0.0]
    assert judge_server.calls == 3  # the call and its two retries
    assert list(gar.stats.fallbacks) == ["unreachable"]

    judge_server.push(*[judge_tools.Status(500)] * 3)
    rows = [{"scenario_id": "s", "reward": 1, "final_text": t} for t in ("x", "y")]
    with pytest.raises(GraderUnavailable, match="HTTP 500"):
        GroupwiseGrading(grader=make_judge("grader")).check_spread(rows)


@pytest.mark.parametrize(
    ("status", "concurrency", "advice", "not_said"),
    [
        (500, 1, "The server failed on its side: its log says why", "concurrency=1"),
        (500, 4, "If it is overloaded: fewer calls at once (grader.judge.concurrency=1; now 4)", "now 4 ("),
        (401, 1, "The server refused the key: check grader.judge.api_key_env", "concurrency"),
        (404, 1, "The endpoint refused the request: check grader.judge.model", "concurrency"),
    ],
)
def test_the_advice_for_a_judge_that_answers_nothing_fits_its_failure(
    make_judge, judge_server, judge_tools, status, concurrency, advice, not_said
) -> None:
    judge_server.push(*[judge_tools.Status(status)] * 9)
    rows = [{"scenario_id": "s", "reward": r, "final_text": t} for r, t in ((1, "x"), (1, "y"), (0, "z"))]
    judge = make_judge("grader", concurrency=concurrency)
    with pytest.raises(GraderUnavailable) as caught:
        GroupwiseGrading(grader=judge).check_spread(rows)
    assert advice in str(caught.value) and (not not_said or not_said not in str(caught.value)), str(caught.value)


def test_a_timeout_at_one_call_at_a_time_asks_for_time_not_fewer_calls(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(*[judge_tools.Hang(1.0)] * 3)
    rows = [{"scenario_id": "s", "reward": r, "final_text": t} for r, t in ((1, "x"), (1, "y"), (0, "z"))]
    judge = make_judge("grader", concurrency=1, timeout_s=0.2, max_retries=0)
    with pytest.raises(GraderUnavailable) as caught:
        GroupwiseGrading(grader=judge).check_spread(rows)
    assert "Try: a longer grader.judge.timeout_s" in str(caught.value) and "concurrency=1" not in str(caught.value)


def _completion_body(content: str) -> str:
    """A whole chat-completion body, as a server would send it."""
    message = {"role": "assistant", "content": content}
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": message}]})


_ANSWER = '{"ranking": [["A", "B"]], "hacks": [], "reasons": {}}'
_CUT = _completion_body(_ANSWER)[:70]  # the connection closed cleanly mid-object (a proxy's idle timeout)


@pytest.mark.parametrize(
    ("action", "said"),
    [
        (lambda tools: tools.Raw(""), "the body is empty"),
        (lambda tools: tools.Raw(_CUT), "not JSON (cut short?) after 70 characters"),
        (lambda tools: tools.Raw("<html>502 Bad Gateway</html>", content_type="text/html"), "502 Bad Gateway"),
        (lambda tools: tools.Raw('{"id": "chatcmpl-1", "choices": []}'), "no choices"),
        (lambda tools: tools.Raw('{"error": {"message": "upstream went away"}}'), "upstream went away"),
        (lambda tools: tools.Raw('{"choices": [{"index": 0, "text": "{}"}]}'), "no message"),
        (lambda tools: tools.Reply(""), "the message is empty"),
    ],
    ids=["empty-body", "cut-body", "html-page", "no-choices", "error-in-a-200", "no-message", "empty-message"],
)
def test_a_200_that_is_no_completion_is_retried_like_a_dropped_connection(
    make_judge, judge_server, judge_tools, action, said
) -> None:
    judge_server.push(action(judge_tools), action(judge_tools))
    judge = make_judge("grader")
    assert judge(group())["ranking"]  # the third request got the real answer
    assert judge_server.calls == 3
    stats = judge.stats.as_dict()
    assert stats["calls"] == 3 and stats["retries"] == 2 and stats["failures"] == {}
    assert len(judge.stats.latencies) == 1  # only the answer counts as one

    judge_server.push(*[action(judge_tools)] * 3)
    with pytest.raises(GraderUnavailable, match="after 2 retries") as caught:
        judge(group(tag="again"))
    assert "HTTP 200 but" in str(caught.value) and said in str(caught.value)
    assert judge_server.calls == 6 and judge.stats.retries == 4


def test_bad_200s_after_the_retries_fall_back_in_the_batch_and_in_training(
    make_judge, judge_server, judge_tools
) -> None:
    def by_group(body):
        if "poison" in json.dumps(body):
            return judge_tools.Raw(_CUT)
        return judge_tools.Reply(judge_tools.auto_answer(body))

    judge_server.push(*[by_group] * 4)
    judge = make_judge("grader")
    answers = judge.grade_groups([group(tag="ok"), group(tag="poison")])
    assert "ranking" in answers[0]
    assert isinstance(answers[1], JudgeCallError) and answers[1].kind == "bad response"
    assert judge_server.calls == 4  # the good group once, the cut one three times
    assert judge.stats.retries == 2 and judge.stats.failures == {"bad response": 1}

    judge_server.push(*[judge_tools.Raw("")] * 3)
    gar = GroupwiseGrading(grader=make_judge("grader"))
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0], num_generations=3)
    assert reward(prompts=["p"] * 3, completions=["a", "b", "c"]) == [1.0, 1.0, 0.0]  # the original rewards
    assert judge_server.calls == 7
    assert list(gar.stats.fallbacks) == ["unreachable"]


def test_the_model_agents_chat_client_retries_a_bad_200_too(judge_server, judge_tools) -> None:
    from whileai.simulations.chat import ChatClient, endpoint_config

    config = endpoint_config(
        judge_server.url,
        "test-judge",
        api_key_env=None,
        temperature=0.0,
        max_tokens=64,
        extra_body=None,
        timeout_s=5.0,
        max_retries=2,
        concurrency=2,
        what="policy",
    ).model_copy(update={"backoff_base_s": 0.01, "backoff_max_s": 0.05})
    judge_server.push(judge_tools.Raw(""), judge_tools.Raw('{"choices": []}'), judge_tools.Reply("hello"))
    client = ChatClient(config, role="policy")
    try:
        answer = client.chat([{"role": "user", "content": "hi"}])
    finally:
        client.close()
    assert answer.message["content"] == "hello"
    assert judge_server.calls == 3 and client.stats.retries == 2


def test_one_failing_group_of_a_batch_falls_back_alone(make_judge, judge_server, judge_tools) -> None:
    def by_group(body):
        if "poison" in json.dumps(body):
            return judge_tools.Status(500)
        return judge_tools.Reply(judge_tools.auto_answer(body))

    judge_server.push(*[by_group] * 8)
    judge = make_judge("grader")
    answers = judge.grade_groups([group(tag="ok"), group(tag="poison"), group(tag="fine")])
    assert isinstance(answers[1], JudgeCallError) and "after 2 retries" in str(answers[1])
    assert "ranking" in answers[0] and "ranking" in answers[2]
    assert judge.stats.failures == {"http 500": 1}


@pytest.mark.slow
def test_an_answer_slower_than_the_timeout_falls_back(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(judge_tools.Hang(6.0))
    judge = make_judge("grader", timeout_s=0.3, max_retries=0)
    gar = GroupwiseGrading(grader=judge)
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0, 1.0, 1.0, 0.0], num_generations=3)
    start = time.perf_counter()
    one, two = "<tool_call>x</tool_call>", "<tool_call>x</tool_call>" * 2
    out = reward(prompts=["p"] * 3 + ["q"] * 3, completions=[one, two, "c", one, two, "f"])
    assert time.perf_counter() - start < 3.0  # 10x the timeout, half the hang
    # One group hung and fell back to its rewards; the other was answered and redistributed.
    assert sorted([out[:3] == [1.0, 1.0, 0.0], out[3:] == [1.0, 1.0, 0.0]]) == [False, True]
    assert judge.stats.failures == {"timeout": 1}


@pytest.mark.slow
def test_the_batch_deadline_cancels_what_is_left(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(judge_tools.Hang(10.0))
    judge = make_judge("grader", batch_deadline_s=0.5)
    start = time.perf_counter()
    answers = judge.grade_groups([group(tag="slow"), group(tag="quick")])
    assert time.perf_counter() - start < 5.0  # 10x the deadline, half the hang
    late = [a for a in answers if isinstance(a, Exception)]
    assert len(late) == 1 and isinstance(late[0], JudgeCallError) and late[0].kind == "deadline"


def test_connection_refused_stops_the_preflight_and_falls_back_in_training(make_judge, judge_tools, page_rows) -> None:
    url = judge_tools.closed_port_url()
    with pytest.raises(GraderUnavailable) as caught:
        GroupwiseGrading(grader=make_judge("grader", base_url=url)).check_spread(page_rows)
    assert url in str(caught.value) and "connection error" in str(caught.value)
    assert caught.value.exit_code == 4

    judge = make_judge("grader", base_url=url)
    gar = GroupwiseGrading(grader=judge)
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 0.0], num_generations=2)
    assert reward(prompts=["p", "p"], completions=["a", "b"]) == [1.0, 0.0]
    assert gar.stats.failed == 1 and judge.stats.failures == {"unreachable": 1}


def test_a_reply_cut_at_max_tokens_says_so(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(judge_tools.Reply('{"ranking": [["A"', finish_reason="length"))
    with pytest.raises(JudgeAnswerError, match="max_tokens=1024"):
        make_judge("grader")(group())
