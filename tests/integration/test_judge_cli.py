"""``whileai spread --recipe`` with a judge grader against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
PAGE = (
    "spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75\n"
    "spread: yes. The grader tells these passes apart.\n"
)
# The judge (the page's rule behind HTTP) reads content: it keeps its ranking when the rollouts are reordered and ties
# a pass with its copy.
CONTROLS = (
    "controls: agreement under reordering tau 1.00 (n=2 groups, at least 0.50 needed); identical passes tied in "
    "2 of 2 controls (at most 10% may differ)\n"
)
runner = CliRunner()


def judge_recipe(tmp_path: Path, base_url: str) -> Path:
    recipe = yaml.safe_load((REPO / "recipes" / "refund_judge.yaml").read_text())
    recipe["grader"]["judge"].update(
        base_url=base_url, cache_dir=str(tmp_path / "cache"), max_retries=1, backoff_base_s=0.01, timeout_s=5.0
    )
    recipe["spread"]["rows"] = str(REPO / "recipes" / "refund_rows.jsonl")
    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_spread_with_the_judge_recipe_caches_and_refetches(judge_server, tmp_path: Path) -> None:
    recipe = judge_recipe(tmp_path, judge_server.url)
    first = runner.invoke(app, ["spread", "--recipe", str(recipe)], catch_exceptions=False)
    assert first.exit_code == 0 and first.stdout == PAGE + CONTROLS
    calls = len(judge_server.requests)
    assert calls == 4  # one per group with two or more passes, and one per control group
    again = runner.invoke(app, ["spread", "--recipe", str(recipe), "--json"], catch_exceptions=False)
    # from the cache, the controls included (their shuffles are seeded)
    assert json.loads(again.stdout)["verdict"] == "yes" and len(judge_server.requests) == calls
    fresh = runner.invoke(app, ["spread", "--recipe", str(recipe), "--no-cache"], catch_exceptions=False)
    assert fresh.exit_code == 0 and len(judge_server.requests) == 2 * calls


def test_an_unreachable_judge_exits_4_naming_the_url(judge_tools, tmp_path: Path) -> None:
    url = judge_tools.closed_port_url()
    recipe = judge_recipe(tmp_path, url)
    result = runner.invoke(app, ["spread", "--recipe", str(recipe)])
    assert result.exit_code == 4 and url.split("/v1")[0] in result.stderr


def test_the_recipes_hosted_judge_command_works_with_overrides(judge_server, tmp_path: Path, monkeypatch) -> None:
    """The command recipes/refund_judge.yaml shows for a hosted judge, pointed at the scripted server: every override
    reaches the judge (URL, model, the key's variable), and the key itself is sent but never printed."""
    monkeypatch.setenv("WHILEAI_TEST_KEY", "sk-test-secret-1234")
    monkeypatch.chdir(REPO)
    args = [
        "spread",
        "--recipe",
        "recipes/refund_judge.yaml",
        f"grader.judge.base_url={judge_server.url}",
        "grader.judge.model=gpt-4.1-mini",
        "grader.judge.api_key_env=WHILEAI_TEST_KEY",
        f"grader.judge.cache_dir={tmp_path / 'cache'}",
    ]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.startswith(PAGE), result.stderr
    request = judge_server.requests[0]
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert request["body"]["model"] == "gpt-4.1-mini"
    assert headers.get("authorization") == "Bearer sk-test-secret-1234"
    assert "sk-test-secret" not in result.stdout + result.stderr
