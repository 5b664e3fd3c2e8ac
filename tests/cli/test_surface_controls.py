"""The surface controls: a grader that reads the work but pays for length, formatting or a claim of correctness is
refused by `whileai spread` (exit 1, the kind named), on the simulated refunds; honest graders keep their yes; the
changed copies leave every tool call, tool result and code block as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.grading.controls import SURFACES, changed, make_control, surface_features

runner = CliRunner()

GRADERS = """
import re


def _tied(passes, key):
    ties = {}
    for g in passes:
        ties.setdefault(key(g), []).append(g["index"])
    return [ties[k] for k in sorted(ties)]


def calls(g):
    return g["completion"].count("<tool_call>")


def longest_first(group):
    return {"ranking": _tied([g for g in group if g["passed"]], lambda g: -len(g["completion"]))}


def markdown_first(group):
    marked = lambda g: bool(re.search(r"\\*\\*|^#+ |^- ", g["completion"], re.M))
    return {"ranking": _tied([g for g in group if g["passed"]], lambda g: (not marked(g), calls(g)))}


def claims_first(group):
    claims = lambda g: bool(re.search(r"correct|verified|checked", g["completion"], re.I))
    return {"ranking": _tied([g for g in group if g["passed"]], lambda g: (not claims(g), calls(g)))}


def shortest_first(group):
    return {"ranking": _tied([g for g in group if g["passed"]], lambda g: len(g["completion"]))}
"""


@pytest.fixture(scope="module")
def refunds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("surface")
    rows = folder / "refunds.jsonl"
    result = runner.invoke(app, ["simulate", "--scenarios", "builtin:refunds", "--n", "8", "--out", str(rows)])
    assert result.exit_code == 0, result.stderr
    graders = folder / "graders.py"
    graders.write_text(GRADERS)
    return rows, graders


@pytest.mark.parametrize(
    ("grader", "paid", "words"),
    [
        ("longest_first", ["padding", "formatting", "claim"], "length, formatting and claims of correctness"),
        ("markdown_first", ["formatting"], "formatting"),
        ("claims_first", ["claim"], "claims of correctness"),
    ],
)
def test_a_grader_that_pays_for_a_surface_is_refused_naming_it(refunds, grader, paid, words) -> None:
    rows, graders = refunds
    result = runner.invoke(app, ["spread", str(rows), "--grader", f"{graders}:{grader}", "--json"])
    assert result.exit_code == 1, result.stdout
    report = json.loads(result.stdout)
    surfaces = report["controls"]["surfaces"]
    assert sorted(k for k, v in surfaces.items() if v["paid_for"]) == sorted(paid)
    assert all(v["controls"] >= 10 for v in surfaces.values())  # 32 controls, the three kinds in turn
    assert report["verdict"] == "no" and f"it pays for {words}:" in report["conclusion"]
    assert "say in its prompt that length, formatting and claims of correctness are not quality" in report["conclusion"]
    for kind, counts in surfaces.items():
        assert counts["held"] == (0 if kind in paid else counts["controls"]), kind


@pytest.mark.parametrize("grader", ["builtin", "shortest_first"])
def test_honest_graders_keep_their_yes_with_every_surface_held(refunds, grader) -> None:
    rows, graders = refunds
    chosen = [] if grader == "builtin" else ["--grader", f"{graders}:{grader}"]
    result = runner.invoke(app, ["spread", str(rows), *chosen])
    assert result.exit_code == 0, result.stdout
    controls = result.stdout.splitlines()[2]
    assert re.search(r"surface copies held: padding (\d+) of \1, formatting (\d+) of \2, claim (\d+) of \3", controls)


TRANSCRIPT = (
    '<tool_call>lookup_order {"order_id": "ORD-1"}</tool_call>\n<tool_result>{"ok": true}</tool_result>\n'
    "agent: Done: I refunded $5 on ORD-1.\nAnything else?"
)
JSON_CALLS = '{"name": "refund", "arguments": {"order_id": "ORD-1"}}\nRefunded.'
CODE = "Here is the fix:\n```python\ndef add(a, b):\n    return a + b\n```"


@pytest.mark.parametrize("text", [TRANSCRIPT, JSON_CALLS, CODE, "<tool_call>x</tool_call> done", ""])
@pytest.mark.parametrize("change", [f"{k}/{v}" for k, variants in SURFACES.items() for v in range(len(variants))])
def test_a_surface_change_leaves_the_work_as_it_was(text, change) -> None:
    new = changed(text, change)
    assert new != text
    structure = [line for line in text.splitlines() if re.match(r"\s*[{<\[]|```|\s{4}", line) or "</" in line]
    kept = [line for line in new.splitlines() if line in structure]
    assert kept == structure  # every tool call, result, JSON line and code line, in order, unchanged
    for word in re.findall(r"[A-Za-z$0-9.-]+", text):
        assert word in new  # the answer's words stay
    kind = change.split("/")[0]
    feature = {"padding": "length", "formatting": "markup", "claim": "claims"}[kind]
    assert surface_features(new)[feature] > surface_features(text)[feature]


def test_a_conversation_is_changed_in_its_last_assistant_message_only() -> None:
    chat = [
        {"role": "user", "content": "refund ORD-1"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "refund", "arguments": "{}"}}]},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "Refunded ORD-1."},
    ]
    new = changed(chat, "claim/0")
    assert (
        new[:3] == chat[:3]
        and new[3]["content"].startswith("Refunded ORD-1.")
        and chat[3]["content"] == "Refunded ORD-1."
    )
    assert "double-checked" in new[3]["content"]


def test_the_wording_is_drawn_with_the_seed_from_several() -> None:
    drawn = {make_control(4, [0, 1], seed=f"task-{g}", turn=g).surface_change for g in range(60)}
    for kind, variants in SURFACES.items():
        assert {c for c in drawn if c.startswith(kind)} == {f"{kind}/{v}" for v in range(len(variants))}
    assert make_control(4, [0, 1], seed="a", turn=2) == make_control(4, [0, 1], seed="a", turn=2)
