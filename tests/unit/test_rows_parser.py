"""The JSONL parser: orjson (when installed) and the standard library read every file the same, errors included."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whileai.errors import BadInput, MissingExtra
from whileai.rows import JSON_ENV, GroupsNotContiguous, RowStats, iter_groups, json_parser

orjson = pytest.importorskip("orjson")

PARSERS = ("json", "orjson")

# Lines where the two parsers differ (orjson refuses or reads them otherwise) or that take the slow path.
AWKWARD = [
    '{"scenario_id": "a", "reward": 1.0, "final_text": "<tool_call>x</tool_call>", "prompt": "p"}',
    '{"scenario_id": "a", "reward": true, "final_text": "caf\\u00e9 \\ud83d\\ude00"}',  # a boolean reward
    '{"scenario_id": 18446744073709551616, "reward": 1, "final_text": "big id"}',  # orjson: a float
    '{"scenario_id": -9223372036854775809, "reward": 0, "final_text": "small id"}',
    '{"scenario_id": 7, "reward": 9007199254740993, "final_text": "beyond 2**53"}',
    '{"scenario_id": 7, "reward": 1, "final_text": [{"role": "assistant", "content": "done"}]}',
    '{"scenario_id": "s", "reward": 1, "final_text": "lone \\ud800 surrogate"}',  # orjson refuses it
    '{"scenario_id": "s", "reward": 1, "final_text": "x", "prompt": [{"role": "user", "content": "hi"}]}',
    '{"scenario_id": "s", "reward": 1, "final_text": "dup", "final_text": "last wins"}',
    "",  # blank lines are skipped
    '  {"scenario_id": "s", "reward": 0.5, "final_text": "padded"}  \r',
]

BAD = [
    ("{oops", "not valid JSON"),
    ('{"scenario_id": "a", "reward": "1", "final_text": "x"}', "field 'reward' is not a number"),
    ('{"scenario_id": "a", "reward": [1], "final_text": "x"}', "field 'reward' is not a number"),
    ('{"scenario_id": "a", "final_text": "x"}', "missing field 'reward'"),
    ('{"scenario_id": "a", "reward": 1, "final_text": "x"} trailing', "not valid JSON"),
    ("[1, 2]", "a row is a JSON object"),
]


def read(path: Path, parser: str, monkeypatch, **options) -> tuple[list, RowStats]:
    monkeypatch.setenv(JSON_ENV, parser)
    stats = RowStats()
    return list(iter_groups(path, stats=stats, **options)), stats


@pytest.mark.parametrize("contiguous", [True, False])
def test_both_parsers_read_awkward_rows_alike(tmp_path: Path, monkeypatch, contiguous: bool) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(AWKWARD) + "\n", encoding="utf-8")
    plain, plain_stats = read(path, "json", monkeypatch, contiguous=contiguous)
    fast, fast_stats = read(path, "orjson", monkeypatch, contiguous=contiguous)
    assert fast == plain and fast_stats == plain_stats
    groups = dict(plain)
    # The standard library's reading: an integer group id stays an integer, a boolean reward counts as 1.0.
    assert "18446744073709551616" in groups and "-9223372036854775809" in groups
    assert groups["a"][1][0] == 1.0 and groups["7"][0][0] == 9007199254740992.0


@pytest.mark.parametrize(("line", "message"), BAD)
def test_both_parsers_name_a_bad_line_alike(tmp_path: Path, monkeypatch, line: str, message: str) -> None:
    good = json.dumps({"scenario_id": "a", "reward": 1, "final_text": "x"})
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{good}\n{line}\n{good}\n")
    errors = []
    for parser in PARSERS:
        monkeypatch.setenv(JSON_ENV, parser)
        with pytest.raises(BadInput) as caught:
            list(iter_groups(path, contiguous=True))
        errors.append(str(caught.value))
        stats = RowStats()
        assert list(iter_groups(path, skip_bad=True, stats=stats)) == [("a", [(1.0, "", "x")] * 2)]
        assert stats.skipped == 1 and stats.examples == [errors[-1]]
    assert errors[0] == errors[1] and f"{path} line 2: " in errors[0] and message in errors[0]


# A verifier's None, and what float32 cannot hold: unscorable (NaN) members, not bad rows.
UNSCORABLE = ["null", "NaN", "Infinity", "-Infinity", "1e999", "1e39", "-3.5e38", "1" + "0" * 400]


@pytest.mark.parametrize("reward", UNSCORABLE)
def test_both_parsers_read_an_unscorable_reward_as_nan(tmp_path: Path, monkeypatch, reward: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(
        f'{{"scenario_id": "a", "reward": 1, "final_text": "x"}}\n'
        f'{{"scenario_id": "a", "reward": {reward}, "final_text": "y"}}\n'
    )
    for parser in PARSERS:
        monkeypatch.setenv(JSON_ENV, parser)
        [(_, members)] = list(iter_groups(path, contiguous=True))
        assert members[0] == (1.0, "", "x") and members[1][0] != members[1][0] and members[1][1:] == ("", "y")


def test_non_utf8_lines_are_named_alike(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"scenario_id": "a", "reward": 1, "final_text": "\xe9"}\n')
    errors = set()
    for parser in PARSERS:
        monkeypatch.setenv(JSON_ENV, parser)
        with pytest.raises(BadInput, match="line 1: not valid JSON") as caught:
            list(iter_groups(path))
        errors.add(str(caught.value))
    assert len(errors) == 1


# Any JSON value, in the places a row's fields go: the parsers must agree on all of them.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner))
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user", "tool"]), "content": scalars}))
rows = st.fixed_dictionaries(
    {},
    optional={
        "scenario_id": st.one_of(st.sampled_from(["g1", "g2"]), values),
        "reward": st.one_of(st.sampled_from([0.0, 1.0, 1, 0]), values),
        "final_text": st.one_of(st.text(max_size=20), messages, values),
        "prompt": st.one_of(st.none(), st.text(max_size=5), messages),
    },
)


@given(st.lists(st.one_of(rows, values), max_size=12))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_parsers_agree_on_any_rows(tmp_path: Path, monkeypatch, lines: list) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8", errors="surrogatepass")
    results = []
    for parser in PARSERS:
        monkeypatch.setenv(JSON_ENV, parser)
        for contiguous in (False, True):  # the one-pass read has its own loop for orjson
            stats = RowStats()
            try:
                groups = list(iter_groups(path, skip_bad=True, stats=stats, contiguous=contiguous))
            except BadInput as err:  # nothing to grade
                groups = [str(err)]
            except GroupsNotContiguous:
                groups, stats = ["split"], RowStats()
            results.append((groups, stats))
    assert results[0] == results[2] and results[1] == results[3]


def test_the_parser_is_chosen_by_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(JSON_ENV, raising=False)
    assert json_parser() == "orjson"
    monkeypatch.setenv(JSON_ENV, "json")
    assert json_parser() == "json"
    monkeypatch.setenv(JSON_ENV, "simdjson")
    with pytest.raises(BadInput, match="WHILEAI_JSON='simdjson'"):
        json_parser()


def test_without_orjson_the_standard_library_reads(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "orjson", None)  # import orjson now raises ImportError
    monkeypatch.delenv(JSON_ENV, raising=False)
    assert json_parser() == "json"
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"scenario_id": "a", "reward": 1, "final_text": "x"}) + "\n")
    assert list(iter_groups(path)) == [("a", [(1.0, "", "x")])]
    monkeypatch.setenv(JSON_ENV, "orjson")
    with pytest.raises(MissingExtra, match=r"whileai-grpo\[fast\]"):
        list(iter_groups(path))


@pytest.mark.parametrize("parser", PARSERS)
def test_a_fault_at_a_line_s_end_is_at_that_line_s_last_column(tmp_path: Path, monkeypatch, parser: str) -> None:
    path = tmp_path / "rows.jsonl"
    cut = '{"scenario_id": "a", "reward": 1, "final_text": "y"'  # the closing brace missing
    path.write_text('{"scenario_id": "a", "reward": 1, "final_text": "x"}\n' + cut + "\n")
    with pytest.raises(BadInput, match=rf"line 2: not valid JSON \(expecting ',' delimiter at column {len(cut) + 1}\)"):
        read(path, parser, monkeypatch)


def test_logged_rows_are_read_as_logged_and_every_missing_field_is_named_at_once(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(
        '{"prompt": "p", "completion": "x", "reward": 1}\n{"prompt": "p", "completion": "y", "reward": 0}\n'
    )
    stats = RowStats()
    assert list(iter_groups(path, stats=stats)) == [("p", [(1.0, "p", "x"), (0.0, "p", "y")])]
    assert stats.read_as.startswith("read as logged rows: each 'prompt' a group, 'completion' the text")
    path.write_text('{"question": "q", "response": "x", "score": 1}\n')
    with pytest.raises(BadInput) as missing:
        read(path, "json", monkeypatch)
    assert (
        "line 1: missing fields 'scenario_id', 'reward' and 'final_text' (the row has question, response, score; "
        "name them with --group-key question --reward-key score --text-key response, or spread.group_key, "
        "spread.reward_key, spread.text_key in a recipe)" in str(missing.value)
    )
