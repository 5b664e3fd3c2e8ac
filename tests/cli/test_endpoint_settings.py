"""Every endpoint setting is checked when it is read, not when the first call fails: the judge's base_url in a recipe
(``whileai validate``), the served agent's and the simulated customer's on ``whileai simulate``'s command line; each
refusal exits 2 naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
BAD = [
    ("http://127.0.0.1:99999/v1", "base_url's port 99999 is not a port: a number from 1 to 65535"),
    ("http://127.0.0.1:0/v1", "base_url's port 0 is not a port"),
    ("http://127.0.0.1:80x/v1", "base_url's port is not a number from 1 to 65535"),
    ("http://:8000/v1", "base_url names no host"),
    ("ftp://127.0.0.1:8000/v1", "base_url must start with http:// or https://"),
    ("http://127.0.0.1:8000/v1#x", "base_url holds a fragment"),
    ("http://127.0.0.1:8000/v1\r\nX-Evil: 1", "base_url holds a space, line break or control character"),
]
GOOD = [
    "http://127.0.0.1:8000/v1", "https://api.openai.com/v1/", "http://[::1]:8000/v1", "http://u:p@judge:80/v1",
    "https://x.openai.azure.com/openai/deployments/d?api-version=preview", "HTTP://127.0.0.1:8000/v1", "Https://h/v1",
]  # fmt: skip


@pytest.mark.parametrize(("url", "said"), BAD)
def test_validate_refuses_a_judge_url_no_request_could_go_to(url: str, said: str) -> None:
    result = CliRunner().invoke(
        app, ["validate", str(REPO / "recipes" / "refund_judge.yaml"), f"grader.judge.base_url={url}"]
    )
    assert result.exit_code == 2, result.output
    assert "grader.judge.base_url: " in result.stderr and said in result.stderr


@pytest.mark.parametrize("url", GOOD)
def test_a_url_a_request_can_go_to_validates(url: str) -> None:
    result = CliRunner().invoke(
        app, ["validate", str(REPO / "recipes" / "refund_judge.yaml"), f"grader.judge.base_url={url}"]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("url", "said"), BAD[:2])
def test_simulate_refuses_the_agent_s_and_the_customer_s_url(url: str, said: str, tmp_path: Path) -> None:
    agent = CliRunner().invoke(
        app, ["simulate", "--agent", "model", "--base-url", url, "--model", "m", "-o", str(tmp_path / "r.jsonl")]
    )
    assert agent.exit_code == 2 and f"model_agent: base_url: {said}" in agent.stderr, agent.output
    customer = [
        "simulate",
        "--simulator",
        "--customer-base-url",
        url,
        "--customer-model",
        "m",
        "-o",
        str(tmp_path / "r.jsonl"),
    ]
    refused = CliRunner().invoke(app, customer)
    assert refused.exit_code == 2 and f"customer_model: base_url: {said}" in refused.stderr, refused.output
    assert not (tmp_path / "r.jsonl").exists()
