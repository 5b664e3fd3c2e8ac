"""``whileai spread`` prints the same with either JSONL parser: the report, the JSON, the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.rows import JSON_ENV

pytest.importorskip("orjson")

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "recipes" / "refund_rows.jsonl"
RECIPE = REPO / "recipes" / "refund_scripted.yaml"


def outputs(monkeypatch, *args: str) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) with the standard library, then with orjson."""
    results = []
    for parser in ("json", "orjson"):
        monkeypatch.setenv(JSON_ENV, parser)
        result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        results.append((result.exit_code, result.stdout, result.stderr))
    return results


def test_the_report_and_its_json_read_the_same(monkeypatch) -> None:
    plain, fast = outputs(monkeypatch, "spread", ROWS, "--recipe", RECIPE, "--verbose")
    assert plain == fast and plain[0] == 0 and "hack (zeroed)" in plain[1]
    plain, fast = outputs(monkeypatch, "spread", ROWS, "--recipe", RECIPE, "--json")
    data = [json.loads(out) for _, out, _ in (plain, fast)]
    for item in data:
        item["grader"].pop("grader_seconds", None)
    assert data[0] == data[1] and data[0]["hacks"] == {"refund-22": [2]}


def test_bad_rows_are_named_the_same(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(ROWS.read_text() + '{"scenario_id": "z", "reward": "NaN", "final_text": ""}\n{not json\n')
    plain, fast = outputs(monkeypatch, "spread", path, "--recipe", RECIPE)
    assert plain == fast and plain[0] == 2
    assert f"{path} line 7: field 'reward' is not a number (got 'NaN')" in plain[2]
    plain, fast = outputs(monkeypatch, "spread", path, "--recipe", RECIPE, "--skip-bad-rows")
    assert plain == fast and plain[0] == 0 and "skipped 2 bad row(s) of 8" in plain[2]


def test_an_unscorable_reward_is_counted_not_bad(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(ROWS.read_text() + '{"scenario_id": "refund-17", "reward": NaN, "final_text": ""}\n')
    plain, fast = outputs(monkeypatch, "spread", path, "--recipe", RECIPE, "--json")
    assert plain[0] == fast[0] == 0
    report, other = json.loads(plain[1]), json.loads(fast[1])
    report["grader"].pop("grader_seconds"), other["grader"].pop("grader_seconds")
    assert report == other and report["grader"]["unscorable"] == 1
    assert report["verifier_unscorable"] == 1 and report["failed_groups"] == {} and report["verdict"] == "yes"
