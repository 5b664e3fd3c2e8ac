"""``whileai spread --recipe`` with a judge grader against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import child_processes
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
    "2 of 2 controls (at most 10% may differ); injection held in 2 of 2 (1 of 1 text, 1 of 1 JSON-shaped); surface "
    "copies scored higher: padding 0 of 1, formatting 0 of 1, claim untried (at most 10% may, or half as many as "
    "scored lower); position effect 0.913 (the "
    "spread of the mean score by display slot) beside differences between passes 0.225, over 4 graded orders, at "
    "least 20 needed to judge\n"
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


def test_a_real_sigint_to_spread_waiting_on_a_judge_exits_130(judge_server, judge_tools, tmp_path: Path) -> None:
    """Ctrl-C while the judge takes its time: exit 130 with a word, no traceback (the process in its own group)."""
    judge_server.push(*[judge_tools.Hang(30)] * 8)
    recipe = judge_recipe(tmp_path, judge_server.url)
    command = [sys.executable, "-m", "whileai.cli.main", "spread", "--recipe", str(recipe), "grader.judge.timeout_s=60"]
    with child_processes.spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        deadline = time.monotonic() + 120
        while not judge_server.requests and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert judge_server.requests, "the judge was never asked"
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.strip().endswith("whileai: interrupted (Ctrl-C)") and "Traceback" not in stderr


def test_spread_shows_the_judges_progress_with_its_rate_on_a_terminal(judge_tools, tmp_path: Path) -> None:
    """On a terminal (Rich's TTY_COMPATIBLE stands in for one) the judge's batches move a bar with the groups judged,
    their rate and the judge's tokens per second; off a terminal nothing is drawn. The plan line says how many
    calls go at once and why."""
    server = judge_tools.JudgeServer(delay=0.3).start()
    try:
        recipe = judge_recipe(tmp_path, server.url)
        command = [sys.executable, "-m", "whileai.cli.main", "spread", "--recipe", str(recipe), "--no-cache"]
        shown = child_processes.run(command, env={**os.environ, "TTY_COMPATIBLE": "1"}, timeout=120)
        plain = child_processes.run(command, env={**os.environ, "TTY_COMPATIBLE": "0"}, timeout=120)
    finally:
        server.stop()
    assert shown.returncode == plain.returncode == 0, shown.stderr
    assert "grading" in shown.stderr and " groups/s" in shown.stderr and "judge tok/s" in shown.stderr, shown.stderr
    assert "groups/s" not in plain.stderr
    assert "call(s) at once" in plain.stderr and "timeout_s=" in plain.stderr
