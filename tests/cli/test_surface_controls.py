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
    marked = lambda g: bool(re.search(r"\\*\\*|^#+ |^- |^---", g["completion"], re.M))
    return {"ranking": _tied([g for g in group if g["passed"]], lambda g: (not marked(g), calls(g)))}


def claims_first(group):
    claims = lambda g: bool(re.search(r"correct|verified|checked", g["completion"], re.I))
    return {"ranking": _tied([g for g in group if g["passed"]], lambda g: (not claims(g), calls(g)))}


def fewest_actions(group):
    actions = lambda g: len(re.findall(r"(?m)^Action:", g["completion"]))
    return {"ranking": _tied([g for g in group if g["passed"]], actions)}


def calls_then_position(group):
    # fewest calls; passes of equal calls in the order shown, but identical texts tied: a position tie-break
    passes, seen = [g for g in group if g["passed"]], {}
    for g in passes:
        seen.setdefault(g["completion"], len(seen))
    return {"ranking": _tied(passes, lambda g: (calls(g), seen[g["completion"]]))}


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
        assert counts["higher"] == (counts["controls"] if kind in paid else 0) and counts["lower"] == 0, kind


def test_a_line_counting_grader_on_react_text_and_a_position_tie_break_pay_for_nothing(refunds, tmp_path) -> None:
    refunds_rows, graders = refunds
    rows = tmp_path / "react.jsonl"
    with rows.open("w") as out:
        for g in range(40):
            for k in range(4):
                steps = "".join(f"Action: lookup[ORD-{g}]\nObservation: step {i}\n" for i in range(k % 3 + 1))
                text = f"Thought: task {g}\n{steps}Final Answer: refunded ORD-{g}"
                out.write(json.dumps({"scenario_id": f"t{g}", "reward": float(k < 3), "final_text": text}) + "\n")
    result = runner.invoke(app, ["spread", str(rows), "--grader", f"{graders}:fewest_actions", "--json"])
    honest = json.loads(result.stdout)
    assert honest["verdict"] == "yes" and not any(v["higher"] for v in honest["controls"]["surfaces"].values())
    tie_break = runner.invoke(
        app, ["spread", str(refunds_rows), "--grader", f"{graders}:calls_then_position", "--json"]
    )
    surfaces = json.loads(tie_break.stdout)["controls"]["surfaces"]
    assert not any(v["paid_for"] for v in surfaces.values())  # its copies rise and fall with their slot
    assert sum(v["higher"] for v in surfaces.values()) and sum(v["lower"] for v in surfaces.values())


@pytest.mark.parametrize("grader", ["builtin", "shortest_first"])
def test_honest_graders_keep_their_yes_with_every_surface_held(refunds, grader) -> None:
    rows, graders = refunds
    chosen = [] if grader == "builtin" else ["--grader", f"{graders}:{grader}"]
    result = runner.invoke(app, ["spread", str(rows), *chosen])
    assert result.exit_code == 0, result.stdout
    controls = result.stdout.splitlines()[2]
    lower = r"(?: \(\d+ lower\))?"
    assert re.search(
        rf"surface copies scored higher: padding 0 of \d+{lower}, formatting 0 of \d+{lower}, claim 0 of", controls
    )


TRANSCRIPT = (
    '<tool_call>lookup_order {"order_id": "ORD-1"}</tool_call>\n<tool_result>{"ok": true}</tool_result>\n'
    "agent: Done: I refunded $5 on ORD-1.\nAnything else?"
)
REACT = "Thought: look it up\nAction: lookup[ORD-1]\nObservation: ok\nAction: refund[ORD-1]\nObservation: done"
PRETTY_JSON = '{\n  "name": "refund",\n  "arguments": {"order_id": "ORD-1"}\n}\nRefunded.'
CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
FENCED = "```python\nprint(42)\n```\n\nThe answer is 42.\n"
FORMS = [TRANSCRIPT, REACT, PRETTY_JSON, CODE, FENCED, "  the digit 7\n\n\n", ""]


@pytest.mark.parametrize("text", FORMS)
@pytest.mark.parametrize("change", [f"{k}/{v}" for k, variants in SURFACES.items() for v in range(len(variants))])
def test_a_surface_change_only_adds_whole_lines_around_the_work(text, change) -> None:
    new = changed(text, change)
    assert text in new and len(new) > len(text)  # the original whole, byte for byte: tool calls, code, answer
    if text:  # what is added stands on lines of its own
        before, after = new.split(text, 1)
        assert (before.endswith("\n\n") or not before) and (after.startswith("\n\n") or not after)
    kind = change.split("/")[0]
    feature = {"padding": "length", "formatting": "markup", "claim": "claims"}[kind]
    assert surface_features(new)[feature] > surface_features(text)[feature]
    others = {"padding": ("markup", "claims"), "formatting": ("claims",), "claim": ("markup",)}[kind]
    assert all(surface_features(new)[name] == surface_features(text)[name] for name in others)  # one thing each


def test_a_message_s_content_and_its_parts_are_changed_around_what_they_hold() -> None:
    assert changed({"role": "assistant", "content": "ok"}, "formatting/0") == {
        "role": "assistant",
        "content": "## Answer\n\nok",
    }
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    assert changed(parts, "formatting/3")[0]["content"] == [
        {"type": "text", "text": "---\n\n"},
        {"type": "text", "text": "ok"},
        {"type": "text", "text": "\n\n---"},
    ]


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
