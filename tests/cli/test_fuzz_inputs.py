"""Inputs no test wrote by hand, through ``validate``, ``train --dry-run`` and ``spread``: mutations of the shipped
recipes (a value of the wrong type, deep nesting, aliases, huge numbers, unicode and control characters, keys that do
not exist) and rows files with truncated, binary, huge and wrongly typed lines. Each run ends with an exit code from
0 to 4, and a refusal is one line on stderr that names the file, line or field: never a traceback, a memory error or
a hang. The inputs that found defects stay below as fixed examples."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.name for p in (REPO / "recipes").glob("*.yaml"))
SECONDS = 60  # far above any run here (about 0.1 s): a bound on a hang, not a timing

# Values of the wrong type, of the right type out of range, and text no recipe would hold.
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.sampled_from(["\x00", "\x1b[2J", "[/INST]", "${oops}", "???", "1e999", "-1", "0", "ＮａＮ", "../" * 40]),
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested mapping (the mapping's own keys and below)."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            found.append((*prefix, key))
            found += _paths(value, (*prefix, key))
    return found


def _set(data: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _run(*args: str) -> tuple[int, str, str]:
    started = time.monotonic()
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert time.monotonic() - started < SECONDS, args
    return result.exit_code, result.stdout, result.stderr


def _assert_a_clean_end(code: int, stdout: str, stderr: str, what: str) -> None:
    assert code in (0, 1, 2, 3, 4), (what, code, stderr[-2000:])
    assert "Traceback" not in stdout + stderr and "MemoryError" not in stdout + stderr, stderr[-2000:]
    if code in (2, 3):  # a refusal: one line, whileai's, naming what it refused
        lines = stderr.strip().splitlines()
        assert len(lines) >= 1 and lines[-1].startswith("whileai: "), (what, stderr[-2000:])
        assert "(rerun with whileai --debug for the traceback)" not in lines[-1], (what, lines[-1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(RECIPES), data=st.data())
@example(name="tiny_cpu_gar.yaml", data=None)
def test_a_mutated_recipe_ends_cleanly(name: str, data: Any, tmp_path: Path) -> None:
    recipe = yaml.safe_load((REPO / "recipes" / name).read_text())
    if data is not None:
        for _ in range(data.draw(st.integers(1, 3))):
            paths = _paths(recipe)
            kind = data.draw(st.sampled_from(["value", "key", "nest"]))
            if kind == "value" and paths:
                _set(recipe, data.draw(st.sampled_from(paths)), data.draw(VALUES))
            elif kind == "key":
                section = data.draw(st.sampled_from([(), *[p for p in paths if isinstance(_get(recipe, p), dict)]]))
                _set(recipe, (*section, data.draw(TEXT) or "x"), data.draw(SCALARS))
            else:
                deep: Any = data.draw(SCALARS)
                for _ in range(data.draw(st.integers(1, 200))):
                    deep = [deep]
                _set(recipe, data.draw(st.sampled_from(paths)) if paths else ("x",), deep)
    path = tmp_path / name
    (tmp_path / "refund_rows.jsonl").write_bytes((REPO / "recipes" / "refund_rows.jsonl").read_bytes())
    try:
        path.write_text(yaml.safe_dump(recipe, allow_unicode=True))
    except (yaml.YAMLError, RecursionError):
        pytest.skip("not dumpable as YAML")
    for command in (["validate", str(path)], ["train", str(path), "--dry-run"]):
        _assert_a_clean_end(*_run(*command), what=f"{command[0]} {recipe!r}"[:2000])


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


ROW = st.fixed_dictionaries(
    {"scenario_id": st.one_of(TEXT, st.integers(), st.none()), "reward": SCALARS, "final_text": st.one_of(TEXT, VALUES)}
)
LINES = st.one_of(
    ROW.map(lambda row: json.dumps(row).encode()),
    ROW.map(lambda row: json.dumps(row).encode()[: max(1, len(json.dumps(row)) // 2)]),  # cut short
    st.binary(max_size=60),
    st.just(b'{"scenario_id": "a", "reward": 1, "final_text": "' + b"x" * 200_000 + b'"}'),
    VALUES.map(lambda value: json.dumps(value).encode()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINES, max_size=12), skip=st.booleans())
@example(lines=[b'{"scenario_id": "a", "reward": 1, "final_text": "x"}', b"\xff\xfe"], skip=False)
@example(lines=[b'{"\\n": null}'], skip=False)  # a field named by a line break: the message was two lines
def test_a_mangled_rows_file_ends_cleanly(lines: list[bytes], skip: bool, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"\n".join(lines) + b"\n")
    code, stdout, stderr = _run("spread", str(rows), *(["--skip-bad-rows"] if skip else []))
    _assert_a_clean_end(code, stdout, stderr, what=repr(lines)[:2000])
    if code == 2:
        assert str(rows) in stderr.strip().splitlines()[-1]  # the refusal names the file


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["\n=1"], "override '\\n=1' is not key=value"),  # a line break in what the message quotes
        (['output_dir="a\\x00b"'], "output_dir holds a NUL character"),  # passed validate, failed at mkdir
        (
            ["data.dataset=a\x01b.jsonl"],
            "data.dataset: no such file",
        ),  # a YAML ReaderError, shown as a traceback's type
    ],
)
def test_the_inputs_that_found_defects(overrides: list[str], said: str) -> None:
    for command in ("validate", "train"):
        extra = ["--dry-run"] if command == "train" else []
        code, stdout, stderr = _run(command, str(REPO / "recipes" / "tiny_cpu_gar.yaml"), *overrides, *extra)
        _assert_a_clean_end(code, stdout, stderr, what=str(overrides))
        assert code == 2 and said in stderr.strip().splitlines()[-1], stderr
