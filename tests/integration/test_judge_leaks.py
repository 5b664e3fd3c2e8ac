"""No piece of a secret leaves the judge's client: a key planted in the environment, echoed back by a hostile server
in error bodies, in a reply that is not JSON and in an answer's reasons, is looked for, eight characters at a time,
in every output channel (``whileai spread`` plain, ``--json``, ``--verbose``, ``--debug``, ``whileai train``'s
messages and every file of its run folder), the log records and the answer cache. A password in ``base_url`` the
same way; a key read from a file with its newline works, and a key with a control character is refused by name.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "WHILEAI_LEAK_TEST_KEY"
KEY = "sk-proj-Zq8vN2xLrT5kW9mB3cY7hJ4dF6gS1aP0eU8iO2uR5tE9wQ3zX7"  # 58 characters, like a real one
PASSWORD = "hunter2-Very-Secret-Pa55"
runner = CliRunner()


def pieces(secret: str, size: int = 8) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def assert_clean(texts: list[str], blobs: list[bytes], secret: str) -> None:
    for piece in pieces(secret):
        for text in texts:
            assert piece not in text, f"{piece!r} leaked into: {text[max(0, text.find(piece) - 80) :][:200]!r}"
        for blob in blobs:
            assert piece.encode() not in blob, f"{piece!r} leaked into a file"


def hostile(judge_tools, judge_server, times: int) -> None:
    """Script ``times`` rounds of a server that echoes the key: in an error body, a reply that is no JSON, an
    answer's reasons, a 401."""
    actions = []
    for _ in range(times):
        actions += [
            judge_tools.Status(500, body={"error": {"message": f"upstream said: bad key {KEY} (rotated?)"}}),
            judge_tools.Reply(f"I will not rank these. Your key {KEY} is logged."),
            lambda body: judge_tools.Reply({**judge_tools.auto_answer(body), "reasons": {"A": f"saw {KEY}"}}),
            judge_tools.Status(401, body={"error": f"invalid api key {KEY}"}),
        ]
    judge_server.push(*actions)


def judge_recipe(tmp_path: Path, base_url: str, **judge) -> Path:
    recipe = yaml.safe_load((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text())
    recipe["grader"] = {
        "kind": "judge",
        "judge": {
            "base_url": base_url,
            "model": "test-judge",
            "cache_dir": str(tmp_path / "cache"),
            "max_retries": 1,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.05,
            **judge,
        },
    }
    path = tmp_path / "judged.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@pytest.mark.slow
def test_a_planted_key_leaks_into_no_output_file_or_log(judge_server, judge_tools, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(KEY_ENV, KEY + "\n")  # a secret made from a file, newline and all
    caplog.set_level(logging.DEBUG)
    recipe = judge_recipe(tmp_path, judge_server.url, api_key_env=KEY_ENV)
    rows = tmp_path / "rows.jsonl"
    rows.write_text((REPO / "recipes" / "refund_rows.jsonl").read_text())
    texts: list[str] = []

    for flags in (["--json"], ["--verbose"], [], ["--no-cache", "--json"]):
        hostile(judge_tools, judge_server, 3)
        result = runner.invoke(app, ["spread", str(rows), "--recipe", str(recipe), *flags])
        texts += [result.stdout, result.stderr]
    hostile(judge_tools, judge_server, 3)
    debug = runner.invoke(app, ["--debug", "spread", str(rows), "--recipe", str(recipe), "--no-cache"])
    texts += [debug.stdout, debug.stderr, repr(debug.exception)]
    assert judge_server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # the key went, stripped
    assert any("whitespace around the key" in r.getMessage() for r in caplog.records)
    assert "[secret hidden]" in " ".join(texts)  # the echoes were masked, not dropped

    out = tmp_path / "run"
    hostile(judge_tools, judge_server, 6)
    smoke = ["trainer.max_steps=2", "trainer.save_steps=2", "data.num_prompts=8", f"output_dir={out}"]
    trained = runner.invoke(app, ["train", str(recipe), *smoke, "--skip-spread-gate"])
    assert trained.exit_code == 0, trained.stderr
    texts += [trained.stdout, trained.stderr]
    report = runner.invoke(app, ["report", str(out), "--json"])
    texts += [report.stdout, report.stderr]
    texts += [record.getMessage() for record in caplog.records] + [caplog.text]

    blobs = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    blobs += [p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert blobs and any(b"judge" in b for b in blobs)
    assert_clean(texts, blobs, KEY)


def test_a_key_with_a_control_character_is_refused_by_name(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-abc\x1bdef-ghijklmnop")
    recipe = judge_recipe(tmp_path, "http://127.0.0.1:9/v1", api_key_env=KEY_ENV)
    rows = REPO / "recipes" / "refund_rows.jsonl"
    result = runner.invoke(app, ["spread", str(rows), "--recipe", str(recipe)])
    assert result.exit_code == 2 and KEY_ENV in result.stderr and "control character" in result.stderr
    assert "ghijklmnop" not in result.stderr


@pytest.mark.slow
def test_a_password_in_the_base_url_is_sent_as_basic_auth_and_never_shown(
    judge_server, judge_tools, tmp_path, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    url = judge_server.url.replace("http://", f"http://judge-user:{PASSWORD}@")
    recipe = judge_recipe(tmp_path, url)
    rows = REPO / "recipes" / "refund_rows.jsonl"
    judge_server.push(judge_tools.Status(500, body={"error": f"no, {PASSWORD}"}))
    texts = []
    for command in (
        ["spread", str(rows), "--recipe", str(recipe), "--json"],
        ["validate", str(recipe), "--print"],
        ["train", str(recipe), "--dry-run"],
    ):
        result = runner.invoke(app, command)
        texts += [result.stdout, result.stderr]
    assert json.loads(texts[0])["verdict"] in ("yes", "no")
    header = judge_server.requests[0]["headers"]["authorization"]
    import base64

    assert header == "Basic " + base64.b64encode(f"judge-user:{PASSWORD}".encode()).decode()
    assert "judge-user:[secret hidden]@" in texts[2]  # the resolved recipe shows the URL, password masked
    from whileai.judge import JudgeConfig

    config = JudgeConfig(base_url=url, model="m")
    texts += [repr(config), str(config), config.model_dump_json(), caplog.text]
    blobs = [p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert_clean(texts, blobs, PASSWORD)
