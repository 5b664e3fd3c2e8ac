"""Shared fixtures: where the reference page lives; ``child_processes``, ``fault_server`` and ``judge_server``
registered for every test module."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_SPEC = REPO.parent / "shared" / "spec"
VENDORED_SPEC = REPO / "tests" / "spec"


def _register(name: str) -> None:
    # pytest runs with --import-mode=importlib: a helper beside the tests is loaded by path under its own name.
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_register("child_processes")
_register("fault_server")
_register("judge_server")

# The command line's tests give each call the width they want (``env={"COLUMNS": ...}``), which Rich reads at every
# print unless COLUMNS was set when its consoles were made: an outer COLUMNS (a shell's, or pytest-xdist's workers')
# would fix every report at that width.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
