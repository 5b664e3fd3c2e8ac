"""The README's walkthrough, run as a newcomer runs it.

The commands come from the README itself, never from a copy here: the main job's line (its ``whileai`` part; the
test environment has the installs), then every ```bash block of the five-minute tour, in the README's order, in a
fresh copy of the checkout (what a clone holds, no ``runs/``). Each command must exit 0, and its output must hold the
```text block the README shows right after it: the lines in order, stdout and stderr each, and (run again with
both streams in one pipe, for every command but ``train``) in the order a terminal shows them; a ``...`` line stands for
lines left out (without one, stdout is exactly the block), and a line ending in `` ...`` for any line that begins
as it does. ``whileai report`` must then print the figures computed here from the two run folders' completion logs:
each run's pass rate over its first and last window and the paired difference of the final pass rates.

The report example the README points to (docs/reports.md, two 6-step runs) is reproduced from real runs the same
way, and the own-trainer block of docs/python.md trains on the main job's model.

Every command runs in a process group of its own, and the group is killed on every way out of it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("trl")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
PYTHON = (REPO / "docs" / "python.md").read_text()  # the README's pointers lead to these pages
REPORTS = (REPO / "docs" / "reports.md").read_text()
ELIDED = "..."
WINDOW = 3  # the report's default --window
# What a fresh clone does not hold: git's folder, build outputs, runs, caches (the patterns of .gitignore).
NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".git", "runs", "build", "dist", "wheels", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", ".venv", "models"
)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


# ---------------------------------------------------------------- the README's commands and what it shows after them


def _section(heading: str) -> str:
    found = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert found is not None, f"the README has no section {heading!r}"
    return found.group(1)


def _shown(text: str) -> list[tuple[str, str | None]]:
    """Each ```bash block of ``text`` with the ```text block right after it (blank lines between), or None."""
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    steps = []
    for number, (lang, body, _, end) in enumerate(blocks):
        if lang != "bash":
            continue
        following = blocks[number + 1] if number + 1 < len(blocks) else None
        adjacent = following is not None and following[0] == "text" and not text[end : following[2]].strip()
        steps.append((body, following[1] if adjacent else None))
    return steps


def _commands(block: str) -> list[list[str]]:
    """One command per line, a ``#`` comment dropped; every one a ``whileai`` command."""
    commands = [words for line in block.splitlines() if (words := shlex.split(line, comments=True))]
    assert commands and all(words[0] == "whileai" for words in commands), block
    return commands


def walkthrough() -> list[tuple[list[list[str]], str | None]]:
    """The README's shell commands in its order: the main job's line, then the tour's blocks."""
    two_lines = _shown(_section("Quick start"))
    main_job, shown = next((b, s) for b, s in two_lines if "whileai train" in b)
    parts = [part.strip() for part in main_job.strip().split("&&")]
    installs = [p for p in parts if p.startswith("pip install")]
    assert parts[: len(installs)] == installs  # the installs first; this environment has them
    steps = [(_commands("\n".join(parts[len(installs) :])), shown)]
    assert "pytest" in _section("Development")  # the test line is CI's (.ci/run), not run from here
    steps += [(_commands(block), shown) for block, shown in _shown(_section("A five-minute tour"))]
    return steps


# ---------------------------------------------------------------- running them


def _whileai() -> str:
    beside = Path(sys.executable).with_name("whileai")
    found = str(beside) if beside.exists() else shutil.which("whileai")
    assert found is not None, "the whileai console script is not installed"
    return found


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "FORCE_COLOR")}
    # a terminal 80 columns wide, as the report's layout assumes; nothing fetched from a hub at run time
    env.update(COLUMNS="80", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _run(words: list[str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """One command in a process group of its own; the group is killed however this returns."""
    done = child_processes.run([_whileai(), *words[1:]], cwd=cwd, env=_environment(), timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def _run_merged(words: list[str], cwd: Path) -> str:
    """One command with stderr into stdout's pipe, unbuffered as on a terminal: its output in screen order."""
    import subprocess

    env = {**_environment(), "PYTHONUNBUFFERED": "1"}
    done = child_processes.run([_whileai(), *words[1:]], cwd=cwd, env=env, timeout=300, capture_output=False,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert done.returncode == 0, (" ".join(words), done.stdout[-3000:])
    return done.stdout


def _assert_in_order(expected: str, merged: str, what: str) -> None:
    """The README's lines (``...`` skipped) appear in ``merged`` in the README's order."""
    printed = [x.rstrip() for x in merged.splitlines()]
    position = 0
    for line in (x.rstrip() for x in expected.splitlines()):
        if line == ELIDED:
            continue
        found = next((i for i in range(position, len(printed)) if _same(line, printed[i])), None)
        assert found is not None, f"{what}: on a terminal {line!r} does not come where the README shows it:\n{merged}"
        position = found + 1


def _fresh_checkout(tmp_path: Path) -> Path:
    """A copy of the checkout as a clone has it: no runs, no build outputs."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=NOT_IN_A_CLONE)
    assert not (checkout / "runs").exists()
    return checkout


def _same(wanted: str, printed: str) -> bool:
    if wanted.endswith(" " + ELIDED):
        return printed.startswith(wanted[: -len(ELIDED)])
    return printed == wanted


def _assert_shows(expected: str, stdout: str, stderr: str, what: str) -> None:
    """``stdout`` and ``stderr`` hold the README's lines (see the module docstring for ``...``)."""
    wanted = [line.rstrip() for line in expected.splitlines()]
    streams = {"stdout": [x.rstrip() for x in stdout.splitlines()], "stderr": [x.rstrip() for x in stderr.splitlines()]}
    position = {"stdout": 0, "stderr": 0}
    matched = set()
    for line in wanted:
        if line == ELIDED:
            continue
        for name, printed in streams.items():
            found = next((i for i in range(position[name], len(printed)) if _same(line, printed[i])), None)
            if found is not None:
                position[name] = found + 1
                matched.add((name, found))
                break
        else:
            pytest.fail(f"{what}: the README shows {line!r}; it printed:\n{stdout}\n--- stderr\n{stderr[-4000:]}")
    if ELIDED not in wanted:
        extra = [x for i, x in enumerate(streams["stdout"]) if ("stdout", i) not in matched]
        assert not extra, f"{what}: printed lines the README does not show: {extra}"


# ---------------------------------------------------------------- the report's figures, computed from the run folders


def _logged_steps(folder: Path) -> dict[int, list[tuple[str, bool]]]:
    """Per logged step, (prompt, passed) of each scored completion in the run's completion logs."""
    steps: dict[int, list[tuple[str, bool]]] = defaultdict(list)
    for path in sorted((folder / "completions").glob("completions_*.parquet")):
        for row in pq.read_table(path, columns=["step", "prompt", "whileai_reward"]).to_pylist():
            reward = row["whileai_reward"]
            if reward is not None and not math.isnan(reward):
                steps[int(row["step"])].append((str(row["prompt"]), reward > 0))
    return dict(steps)


def _pass_rate(completions: list[tuple[str, bool]]) -> float:
    return sum(passed for _, passed in completions) / len(completions)


def _window(steps: dict[int, list[tuple[str, bool]]], which: slice) -> list[tuple[str, bool]]:
    return [c for step in sorted(steps)[which] for c in steps[step]]


def _assert_report_figures(stdout: str, a: Path, b: Path) -> None:
    """The pass rates and the final-pass-rate difference (b minus a) that ``whileai report a b`` prints are the ones
    the two folders' completion logs give: pooled over each window, and paired by prompt over the last one."""
    runs = [_logged_steps(a), _logged_steps(b)]
    printed_rates = re.findall(r"^pass rate \(95% CI\)\s+(\d\.\d\d) \(.*?\)\s+(\d\.\d\d) \(", stdout, re.M)
    computed = [
        (f"{_pass_rate(_window(s, slice(None, WINDOW))):.2f}", f"{_pass_rate(_window(s, slice(-WINDOW, None))):.2f}")
        for s in runs
    ]
    assert printed_rates == computed, (printed_rates, computed)

    per_prompt = []
    for steps in runs:
        prompts: dict[str, list[bool]] = defaultdict(list)
        for prompt, passed in _window(steps, slice(-WINDOW, None)):
            prompts[prompt].append(passed)
        per_prompt.append(prompts)
    shared = sorted(set(per_prompt[0]) & set(per_prompt[1]))
    assert len(shared) >= 2, "the report pairs the arms by prompt only when they share prompts"
    rates = [{p: sum(v) / len(v) for p, v in prompts.items()} for prompts in per_prompt]
    differences = [rates[1][p] - rates[0][p] for p in shared]
    difference = sum(differences) / len(differences)
    lines = [" ".join(line.split()) for line in stdout.splitlines()]
    assert f"difference {difference * 100:+.1f} points".replace("-", "\u2212") in lines, stdout
    sizes = [len(_window(s, slice(-WINDOW, None))) for s in runs]
    assert f"n paired over {len(shared)} tasks ({sizes[0]} and {sizes[1]} completions)" in lines, stdout
    low, high = re.search(r"^95% CI\s+(\S+) to (\S+) \(bootstrap over tasks\)", stdout, re.M).groups()
    low, high = (float(x.replace("\u2212", "-")) for x in (low, high))
    assert low <= round(difference * 100, 1) <= high  # a bootstrap of the mean holds the mean


def _assert_the_main_job(run: Path, stdout: str, stderr: str) -> None:
    """The main job, all 60 steps from a fresh checkout: the gate's verdict on the initial model's own completions
    before training, recorded; a quiet terminal (whileai's gate, table and summary; no TRL completion panels)."""
    summary = json.loads((run / "whileai_run.json").read_text())
    assert summary["steps"] == 60 and summary["grader"]["failed"] == 0 and summary["grader"]["mixed"] > 0
    assert "\u256d" not in stdout + stderr and stdout == "whileai: trained 60 steps; the run is in runs/tiny_cpu_gar\n"
    assert len(stderr.splitlines()) <= 60 + 20
    assert "spread gate on completions of the initial model:" in stderr
    assert "spread: yes." in stderr and "controls: agreement under reordering tau 1.00" in stderr
    assert stderr.index("spread: yes.") < stderr.index(" step ")
    gate = json.loads((run / "spread_gate.json").read_text())
    assert gate["source"] == "sample" and gate["verdict"] == "yes" and gate["spread"]["groups"] >= 4


def _assert_own_trainer_trains(checkout: Path) -> None:
    """docs/python.md's block that builds a ``GroupwiseGRPOTrainer`` on the main job's model trains and prints
    what the page shows, run as a user's own script in the checkout."""
    section = PYTHON
    found = re.search(
        r"```python\n(.*?)```\n\n```text\n(.*?)```", section[section.index("GroupwiseGRPOTrainer") :], re.S
    )
    assert found is not None and "runs/tiny_cpu_gar/final" in found.group(1)
    script = checkout / "runs" / "my_trainer.py"
    script.write_text(found.group(1))
    done = child_processes.run([sys.executable, str(script)], cwd=checkout, env=_environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    _assert_shows(found.group(2), done.stdout, done.stderr, "the README's GroupwiseGRPOTrainer block")
    assert (checkout / "runs" / "my_trainer" / "checkpoint-2").is_dir()


# ---------------------------------------------------------------- the tests


def test_the_readme_walkthrough_runs_in_its_order(tmp_path: Path) -> None:
    """The main job's line and the tour, as the README gives them: each command exits 0 and prints what the README
    shows; the report's figures are the two run folders' (two 60-step runs: about 30 s on 2 quiet cores)."""
    steps = walkthrough()
    commands = [" ".join(words) for block, _ in steps for words in block]
    assert commands[0] == "whileai train recipes/tiny_cpu_gar.yaml"  # the main job, then the tour
    assert commands[-1].startswith("whileai report ") and "the two arms' final pass rates" in README
    assert sum(shown is not None for _, shown in steps) == len(steps)  # the README says what each one prints
    checkout = _fresh_checkout(tmp_path)
    before = {path.name for path in checkout.iterdir()}
    for block, shown in steps:
        stdout = stderr = ""
        for words in block:
            timeout = 900 if words[1] == "train" else 300
            code, out, err = _run(words, checkout, timeout)
            assert code == 0, (" ".join(words), code, out[-2000:], err[-4000:])
            stdout, stderr = stdout + out, stderr + err
            if words == ["whileai", "train", "recipes/tiny_cpu_gar.yaml"]:
                _assert_the_main_job(checkout / "runs" / "tiny_cpu_gar", out, err)
        what = " && ".join(" ".join(words) for words in block)
        if shown is not None:
            _assert_shows(shown, stdout, stderr, what)
        if shown is not None and all(words[1] != "train" for words in block):
            # Once more with both streams in one pipe, written as a terminal shows them: the block's lines in the
            # order they reach the screen (a training run's result is its last line anyway).
            merged = "".join(_run_merged(words, checkout) for words in block)
            _assert_in_order(shown, merged, what)
        if block[-1][1] == "report":
            a, b = (checkout / path for path in block[-1][2:4])
            _assert_report_figures(stdout, a, b)
    _assert_own_trainer_trains(checkout)
    # what the tour writes goes under runs/ (ignored by git), nothing into the checkout's root
    assert {path.name for path in checkout.iterdir()} - before <= {"runs"}


def test_the_readme_report_example_is_what_its_runs_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reports.md's report of two 6-step runs, from the two runs it names, trained in a fresh checkout."""
    found = re.search(r"\n\n((?:(?!\n\n).)*?)\n\n```text\n\$ (whileai report [^\n]+)\n(.*?)```", REPORTS, re.S)
    assert found is not None, "the README shows a report after the commands that make its runs"
    paragraph, command, expected = found.groups()
    trainings = [" ".join(span.split()) for span in re.findall(r"`(whileai train [^`]+)`", paragraph)]
    assert len(trainings) == 2, paragraph
    from typer.testing import CliRunner

    from whileai.cli.main import app

    checkout = _fresh_checkout(tmp_path)
    monkeypatch.chdir(checkout)  # in this process: the walkthrough runs the console script
    for words in [*map(shlex.split, trainings), shlex.split(command)]:
        done = CliRunner().invoke(app, words[1:], env={"COLUMNS": "80", "HF_HUB_OFFLINE": "1"})
        assert done.exit_code == 0, (" ".join(words), done.stdout[-2000:], done.stderr[-4000:])
    assert [line.rstrip() for line in done.stdout.splitlines()] == expected.splitlines()
