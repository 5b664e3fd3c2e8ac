"""Rows files as groups: formats, streaming, split groups, bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import whileai as wai
from whileai.errors import BadInput
from whileai.grading.gate import check_spread_file
from whileai.rows import GroupsNotContiguous, RowFields, RowStats, iter_groups


def write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def row(group: str, reward: float, text: str) -> dict:
    return {"scenario_id": group, "reward": reward, "final_text": text}


def by_calls(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: g["completion"].count("<tool_call>"))
    return {"ranking": [g["index"] for g in passes]}


SPLIT = [row("a", 1, "x"), row("b", 1, "<tool_call>"), row("a", 1, "<tool_call>"), row("b", 0, "z"), row("b", 1, "")]


def test_contiguous_and_split_groups_read_the_same(tmp_path: Path) -> None:
    grouped = sorted(SPLIT, key=lambda r: r["scenario_id"])
    assert list(iter_groups(write(tmp_path / "g.jsonl", grouped))) == list(
        iter_groups(write(tmp_path / "s.jsonl", SPLIT))
    )
    assert list(iter_groups(tmp_path / "s.jsonl")) == [
        ("a", [(1.0, "", "x"), (1.0, "", "<tool_call>")]),
        ("b", [(1.0, "", "<tool_call>"), (0.0, "", "z"), (1.0, "", "")]),
    ]


def test_one_pass_refuses_split_groups(tmp_path: Path) -> None:
    with pytest.raises(GroupsNotContiguous):
        list(iter_groups(write(tmp_path / "s.jsonl", SPLIT), contiguous=True))


def test_spread_on_split_groups_counts_each_group_once(tmp_path: Path) -> None:
    grading = wai.GroupwiseGrading(grader=by_calls)
    restarted = []
    run = check_spread_file(write(tmp_path / "s.jsonl", SPLIT), grading, on_restart=lambda: restarted.append(1))
    assert restarted == [1]
    assert run.report.per_group == {"a": [1.0, 0.5], "b": [0.5, 1.0]}
    assert grading.stats.groups == 2 and grading.stats.grader_calls == 2 and run.rows.rows == 5


def test_bad_rows_named_and_skipped(tmp_path: Path) -> None:
    path = write(
        tmp_path / "r.jsonl", [row("a", 1, "x"), "{oops", {"scenario_id": "a", "reward": None}, row("a", 0, "y")]
    )
    with pytest.raises(BadInput, match=r"r.jsonl line 2: not valid JSON"):
        list(iter_groups(path))
    stats = RowStats()
    assert list(iter_groups(path, skip_bad=True, stats=stats)) == [("a", [(1.0, "", "x"), (0.0, "", "y")])]
    assert stats.rows == 2 and stats.skipped == 2 and "line 3: missing field 'final_text'" in stats.examples[1]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"scenario_id": None, "reward": 1, "final_text": "x"}, "field 'scenario_id' is empty"),
        ({"scenario_id": "a", "reward": "high", "final_text": "x"}, "field 'reward' is not a number"),
        ({"scenario_id": "a", "reward": 1, "final_text": 3}, "not text or a list of messages"),
        ([1, 2], "a row is a JSON object"),
    ],
)
def test_each_bad_field_is_named(tmp_path: Path, bad, message) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(row("a", 1, "x")) + "\n" + json.dumps(bad).replace("Infinity", "1e999") + "\n")
    with pytest.raises(BadInput, match=rf"line 2: .*{message}"):
        list(iter_groups(path))


def test_conversational_text_and_numeric_group_ids(tmp_path: Path) -> None:
    messages = [{"role": "assistant", "content": "done"}]
    path = write(tmp_path / "r.jsonl", [{"scenario_id": 7, "reward": True, "final_text": messages}])
    assert list(iter_groups(path)) == [("7", [(1.0, "", "agent: done")])]


def test_folders_keep_groups_apart_by_file(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", [row("g", 1, "x")])
    write(tmp_path / "b.jsonl", [row("g", 0, "y")])
    assert [g for g, _ in iter_groups(tmp_path)] == ["a.jsonl:g", "b.jsonl:g"]


def test_field_defaults_follow_the_format() -> None:
    assert RowFields().for_columns(["scenario_id", "reward", "final_text"]) == RowFields(
        "scenario_id", "reward", "final_text"
    )
    trl = RowFields().for_columns(["step", "prompt", "completion", "advantage", "whileai_reward"])
    assert (trl.group_key, trl.reward_key, trl.text_key) == ("prompt", "whileai_reward", "completion")
    assert RowFields(reward_key="verifier").for_columns(["completion", "advantage"]).reward_key == "verifier"


def test_unsupported_and_missing_paths(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(BadInput, match=r"must be \.jsonl, \.json or \.parquet"):
        list(iter_groups(tmp_path / "rows.csv"))
    with pytest.raises(BadInput, match=r"no \.jsonl, \.json or \.parquet rows files"):
        empty = tmp_path / "empty"
        empty.mkdir()
        list(iter_groups(empty))


def test_a_run_folder_reads_only_rows_files(tmp_path: Path) -> None:
    write(tmp_path / "rows.jsonl", [row("a", 1, "x"), row("a", 0, "y")])
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    (tmp_path / "more.json").write_text(json.dumps({"rows": [row("b", 1, "z")]}))
    assert [g for g, _ in iter_groups(tmp_path)] == ["more.json:b", "rows.jsonl:a"]


def test_files_of_one_name_in_two_folders_stay_apart(tmp_path: Path) -> None:
    for arm in ("gar", "binary"):
        (tmp_path / arm).mkdir()
        write(tmp_path / arm / "c.jsonl", [row("a", 1, "x"), row("a", 1, "xx")])
    grading = wai.GroupwiseGrading(grader=by_calls)
    run = check_spread_file(tmp_path, grading)
    assert run.report.groups == 2 and len(run.report.scores) == 4


def test_oversized_and_non_utf8_input_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"scenario_id": "a", "reward": 1' + "0" * 400 + ', "final_text": "x"}\n')
    [(_, [(reward, _, _)])] = list(iter_groups(path))  # beyond float: unscorable, not a crash
    assert reward != reward
    broken = tmp_path / "latin.json"
    broken.write_bytes(b'[{"scenario_id": "\xe9"}]')
    with pytest.raises(BadInput, match="not UTF-8"):
        list(iter_groups(broken))
