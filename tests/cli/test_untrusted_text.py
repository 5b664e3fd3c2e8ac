"""Text whileai did not write, printed as text: Rich markup (a Llama-2 prompt's ``[/INST]``, ``[bold]``, a
``[link=...]``), emoji codes and the characters a terminal obeys (ESC's sequences: a hyperlink, clearing the screen)
in rows, task ids, prompts, completions, file names, a grader's error messages and a spread report, through each
command that prints them: nothing is parsed, nothing reaches the terminal raw, nothing stops the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
# What a row, a judge's reply or a file name may hold, and what whileai shows of it.
LINK = "[link=https://evil.example]click[/link]"
CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07 \u202eevil"  # an OSC 52 clipboard write, a right-to-left override
EVIL = f"[/INST] [bold]x[/bold] {LINK} \x1b]8;;https://evil.example\x1b\\ \x1b[2J :smile: {CLIPBOARD}"
SHOWN = f"[/INST] [bold]x[/bold] {LINK} \\x1b]8;;https://evil.example\\x1b\\ \\x1b[2J :smile: {ascii(CLIPBOARD)[1:-1]}"


def invoke(*args: object, code: int | tuple[int, ...] = 0) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})
    codes = code if isinstance(code, tuple) else (code,)
    assert result.exit_code in codes, (result.exit_code, result.output[-3000:])
    printed = result.stdout + result.stderr
    for obeyed in ("\x1b", "\x07", "\u202e", "\U0001f604"):  # no ESC, BEL or override reached the screen, no emoji
        assert obeyed not in printed, printed
    assert "MarkupError" not in printed
    return printed


def rows(folder: Path, name: str = "rows.jsonl", **extra: object) -> Path:
    lines = []
    for reward, text in [(1, "a <tool_call>x</tool_call>"), (1, "b"), (0, "c"), (1, "d <tool_call>x</tool_call>" * 2)]:
        row = {"scenario_id": f"task {EVIL}", "reward": reward, "final_text": f"{text} {EVIL}"}
        lines.append(json.dumps({**row, "prompt": f"[INST] refund {EVIL} [/INST]", **extra}))
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_spread_verbose_shows_rows_and_task_ids_as_text(tmp_path: Path) -> None:
    printed = invoke("spread", rows(tmp_path), "--verbose")
    assert f"task {SHOWN}" in printed and "spread: yes." in printed


def marked_path(root: Path, text: str, suffix: str = "") -> Path:
    """A path whose text holds ``text`` (a markup tag's ``/`` is a folder's end)."""
    path = root / (text + suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_a_file_name_in_an_error_is_shown_as_text(tmp_path: Path) -> None:
    broken = marked_path(tmp_path, "[bold]runs[/bold] [/INST]", ".jsonl")
    broken.write_text('{"scenario_id": "a", "reward": 1\n')
    printed = invoke("spread", broken, code=2)
    assert "[bold]runs[/bold] [/INST].jsonl line 1: not valid JSON" in printed


def test_a_grader_s_error_message_is_shown_as_text(tmp_path: Path) -> None:
    (tmp_path / "graders.py").write_text(f"def broken(group):\n    raise RuntimeError({EVIL!r})\n")
    printed = invoke("spread", rows(tmp_path), "--grader", f"{tmp_path / 'graders.py'}:broken", code=4)
    assert f"RuntimeError: {SHOWN}" in printed


def test_judge_eval_shows_task_ids_and_failures_as_text(tmp_path: Path) -> None:
    path = rows(tmp_path, quality=1)
    printed = invoke("judge-eval", path, "--grader", REPO / "configs" / "grader" / "tool_calls.yaml", code=(0, 1))
    assert "tau" in printed


def test_report_shows_a_spread_report_s_words_as_text(tmp_path: Path) -> None:
    report = {
        "verdict": "broken", "scores": 0, "groups": 0, "std": 0.0, "median": 0.0, "near_median": 0.0,
        "skipped_groups": 0, "failed_groups": {EVIL: 2}, "summary": f"spread check: {EVIL}",
        "conclusion": f"spread: broken. {EVIL}",
    }  # fmt: skip
    path = tmp_path / "spread.json"
    path.write_text(json.dumps(report))
    printed = invoke("report", path)
    assert f"spread: broken. {SHOWN}" in printed and "fell back:" in printed


def test_simulate_and_train_dry_run_show_paths_as_text(tmp_path: Path) -> None:
    out = marked_path(tmp_path, "[bold]rows[/bold] [/INST]", ".jsonl")
    printed = invoke("simulate", "--scenarios", "builtin:refunds", "--n", "2", "--out", out)
    assert f"to {out}" in printed
    verifier = marked_path(tmp_path, "[bold]check[/INST]", ".py")
    verifier.write_text("def check(prompts, completions, **kwargs):\n    return [0.0] * len(completions)\n")
    pytest.importorskip("torch")
    printed = invoke("train", REPO / "recipes" / "my_task_gar.yaml", f"verifier.function={verifier}:check", "--dry-run")
    assert f"{verifier}:check" in printed


def test_eval_names_a_folder_as_text(tmp_path: Path) -> None:
    folder = marked_path(tmp_path, "[link=https:evil.example]run[/link] [/INST]")
    folder.mkdir()
    printed = invoke("eval", folder, code=2)
    assert "[link=https:evil.example]run[/link] [/INST]: no recipe.yaml" in printed


def test_a_verifier_s_repeated_warning_shows_its_text_as_text(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The warning training repeats while a verifier fails (its exception quoting a model's completion) goes through
    the command line's one way of printing, as the final error line does."""
    import logging

    import whileai.cli.console  # noqa: F401  # the command line's handler of whileai's log lines
    from whileai.grading.reference import load_callable
    from whileai.rows.verdicts import VerifierFailures, verifier_rewards

    (tmp_path / "checks.py").write_text(
        f"def check(prompts, completions, **kwargs):\n    raise RuntimeError({EVIL!r})\n"
    )
    verifier = load_callable(f"{tmp_path / 'checks.py'}:check")
    failures = VerifierFailures(logging.getLogger("whileai.verifier").warning, verifier)
    for _ in range(2):
        verifier_rewards(verifier, ["p"] * 2, ["a", "b"], {}, failures)
    printed = capsys.readouterr().err
    for obeyed in ("\x1b", "\x07", "\u202e"):
        assert obeyed not in printed, printed
    assert f"whileai: the verifier gave no reward (2 response(s) so far): check ({tmp_path / 'checks.py'}, line 2)" in (
        printed
    )
    assert f"it raised RuntimeError: {SHOWN} on a batch of 2" in printed and "whileai: whileai:" not in printed
