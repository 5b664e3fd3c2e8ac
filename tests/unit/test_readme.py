"""The README's two lines are what CI and a new user run, and its quickstart prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _fenced(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_ci_runs_the_readme_test_line() -> None:
    line = next(b.strip() for b in _fenced("bash") if "pytest" in b)
    ci = (REPO / ".ci" / "run").read_text()
    assert f"{line} || status=$?" in ci


def test_the_main_job_line_names_shipped_files() -> None:
    line = next(b.strip() for b in _fenced("bash") if "whileai train" in b and b.startswith("pip install"))
    assert line.startswith("pip install torch==2.13.0 && ")  # a looser torch pulls a multi-GB CUDA build
    paths = re.findall(r"recipes/\S+", line)
    assert paths and all((REPO / path).is_file() for path in paths)


def test_quickstart_prints_what_the_readme_says() -> None:
    code = next(b for b in _fenced("python") if "import whileai" in b)
    expected = next(b for b in _fenced("text") if b.startswith("spread check"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README-quickstart", "exec"), {"__name__": "readme"})
    assert out.getvalue() == expected


def test_every_python_example_prints_what_the_readme_shows() -> None:
    """Each python block followed by a text block prints exactly that text (torch examples need the train extra)."""
    import pytest

    pairs = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", README, re.S)
    assert len(pairs) >= 2
    for number, (code, expected) in enumerate(pairs):
        if "import torch" in code:
            pytest.importorskip("torch")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"README-example-{number}", "exec"), {"__name__": "readme"})
        assert out.getvalue() == expected, number


def test_every_command_and_exit_code_is_in_the_readme() -> None:
    from whileai.cli.main import app

    for command in app.registered_commands:
        assert f"`whileai {command.name}" in README, command.name
    for code in range(5):
        assert f"| {code} |" in README


def test_every_file_the_readme_names_is_in_the_checkout() -> None:
    """A cloner has what the README points to (the reference page is vendored under tests/spec/)."""
    named = set(re.findall(r"(?<![\w/.])((?:recipes|configs|tests|benchmarks|core|cli|\.ci)/[\w./-]+)", README))
    assert "tests/spec/groupwise-grading.txt" in named and "../shared" not in README
    missing = [p for p in sorted(named) if "*" not in p and not (REPO / p.rstrip(".")).exists()]
    assert not missing, missing
