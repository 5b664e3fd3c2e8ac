"""The tree is ruff clean (lint and format), as the project's conventions ask."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command: list[str]) -> None:
    if shutil.which("ruff") is None and child_processes.run([sys.executable, "-m", "ruff", "--version"]).returncode:
        pytest.skip("ruff is not installed (the dev extra)")
    done = child_processes.run(
        [sys.executable, "-m", "ruff", *command, "core", "cli", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
