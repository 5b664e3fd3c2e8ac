"""Structured output against servers that refuse it: ``auto`` steps down json_schema -> json_object -> none at once.

The refusals are the servers' own words: llama.cpp before its json_schema support answered
``{"error": {"code": 500, "message": "response_format type must be one of \"text\" or \"json_object\", but got:
json_schema", "type": "server_error"}}`` (ggml-org/llama.cpp#9522, ikawrakow/ik_llama.cpp#778); llama.cpp refuses a
schema it cannot turn into a grammar with a 400 ``JSON schema conversion failed`` (ggml-org/llama.cpp#14227); vLLM
answers 400 ``The provided JSON schema contains features not supported by xgrammar.`` (vllm-project/vllm#16321);
Ollama answers 500 ``{"error": "invalid JSON schema in format"}``.
"""

from __future__ import annotations

import pytest

from whileai.errors import GraderUnavailable


def group(tag: str = "") -> list[dict]:
    return [
        {"index": 0, "prompt": "refund ORD-1", "completion": f"pass 0 {tag}", "reward": 1.0, "passed": True},
        {"index": 1, "prompt": "refund ORD-1", "completion": f"pass 1 {tag}", "reward": 1.0, "passed": True},
        {"index": 2, "prompt": "refund ORD-1", "completion": f"fail 0 {tag}", "reward": 0.0, "passed": False},
    ]


def form(request: dict) -> str | None:
    """The ``response_format`` type a request carried; None for none."""
    return (request["body"].get("response_format") or {}).get("type")


LLAMA_CPP_500 = (
    500,
    {
        "error": {
            "code": 500,
            "message": 'response_format type must be one of "text" or "json_object", but got: json_schema',
            "type": "server_error",
        }
    },
)
LLAMA_CPP_400 = (
    400,
    {
        "error": {
            "code": 400,
            "message": 'JSON schema conversion failed:\nUnrecognized schema: {"enum": []}',
            "type": "invalid_request_error",
        }
    },
)
VLLM_400 = (
    400,
    {
        "object": "error",
        "message": "The provided JSON schema contains features not supported by xgrammar.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
)
OLLAMA_500 = (500, {"error": "invalid JSON schema in format"})


def refusing(judge_tools, refusal, forms=("json_schema",), delay: float = 0.0):
    """A scripted judge that answers ``refusal`` to the response_format types in ``forms`` and the rest as usual."""
    status, body = refusal

    def answer(request_body):
        if (request_body.get("response_format") or {}).get("type") in forms:
            return judge_tools.Status(status, body=body, delay=delay)
        return judge_tools.Reply(judge_tools.auto_answer(request_body))

    return answer


@pytest.mark.parametrize(
    "refusal",
    [LLAMA_CPP_500, LLAMA_CPP_400, VLLM_400, OLLAMA_500],
    ids=["llama.cpp-500", "llama.cpp-400", "vllm-400", "ollama-500"],
)
def test_a_refused_json_schema_is_asked_again_at_once_as_a_json_object(
    make_judge, judge_server, judge_tools, refusal
) -> None:
    judge_server.push(*[refusing(judge_tools, refusal)] * 3)
    judge = make_judge("grader")
    assert judge(group("1"))["ranking"] and judge(group("2"))["ranking"]
    # The refusal cost one request and no retry; the second group went straight to the form that works.
    assert [form(r) for r in judge_server.requests] == ["json_schema", "json_object", "json_object"]
    second = judge_server.requests[1]["body"]["response_format"]
    assert second["schema"] == judge_server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    stats = judge.stats.as_dict()
    assert stats["calls"] == 3 and stats["retries"] == 0 and stats["failures"] == {}
    assert stats["structured_output"] is True and stats["response_format"] == "json_object"


@pytest.mark.parametrize("status", [400, 500])
def test_a_server_that_refuses_every_form_is_asked_without_one(make_judge, judge_server, judge_tools, status) -> None:
    body = {"error": {"message": "response_format is not supported", "type": "server_error"}}
    judge_server.push(*[refusing(judge_tools, (status, body), forms=("json_schema", "json_object"))] * 4)
    judge = make_judge("grader")
    assert judge(group("1"))["ranking"] and judge(group("2"))["ranking"]
    assert [form(r) for r in judge_server.requests] == ["json_schema", "json_object", None, None]
    stats = judge.stats.as_dict()
    assert stats["calls"] == 4 and stats["retries"] == 0
    assert stats["structured_output"] is False and stats["response_format"] == "none"


def test_a_500_that_names_nothing_is_retried_in_the_same_form(make_judge, judge_server, judge_tools) -> None:
    oom = judge_tools.Status(500, body={"error": {"message": "CUDA error: out of memory", "type": "server_error"}})
    judge_server.push(oom, refusing(judge_tools, LLAMA_CPP_500), refusing(judge_tools, LLAMA_CPP_500))
    judge = make_judge("grader")
    assert judge(group())["ranking"]
    # The out-of-memory 500 spent a retry and kept the schema; the one naming json_schema stepped down at once.
    assert [form(r) for r in judge_server.requests] == ["json_schema", "json_schema", "json_object"]
    assert judge.stats.retries == 1 and judge.stats.response_format == "json_object"


def test_structured_output_on_never_steps_down(make_judge, judge_server, judge_tools) -> None:
    judge_server.push(*[refusing(judge_tools, LLAMA_CPP_500)] * 3)
    judge = make_judge("grader", structured_output="on")
    with pytest.raises(GraderUnavailable, match=r"HTTP 500.*json_schema.*after 2 retries"):
        judge(group())
    assert [form(r) for r in judge_server.requests] == ["json_schema"] * 3
    assert judge.stats.response_format == "json_schema"


def test_calls_in_flight_when_refused_step_down_once(make_judge, judge_server, judge_tools) -> None:
    # Every call of the batch is sent the schema before the first refusal comes back (the refusals are slow).
    judge_server.push(*[refusing(judge_tools, LLAMA_CPP_500, delay=0.2)] * 8)
    judge = make_judge("grader")
    answers = judge.grade_groups([group(str(i)) for i in range(4)])
    assert all("ranking" in answer for answer in answers)
    assert sorted(str(form(r)) for r in judge_server.requests) == ["json_object"] * 4 + ["json_schema"] * 4
    assert judge.stats.retries == 0 and judge.stats.response_format == "json_object"
