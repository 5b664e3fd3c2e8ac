"""Shared fixtures: where the reference page lives; ``child_processes``, ``fault_server``, ``judge_server`` and
``extras`` registered for every test module; a test module whose optional install is missing skipped, naming it."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from whileai.errors import MissingExtra

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
_register("extras")

# The command line's tests give each call the width they want (``env={"COLUMNS": ...}``), which Rich reads at every
# print unless COLUMNS was set when its consoles were made: an outer COLUMNS (a shell's, or pytest-xdist's workers')
# would fix every report at that width.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

# A suite started where SIGINT is ignored (a background job of a shell without job control) would hand the ignore to
# every process a test starts, and a test that sends one SIGINT would wait on it in vain: the tests get it back.
if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


_MADE_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """whileai's cache (warm-started tiny models, judge answers) in a folder of this test session's, never the
    user's own: made by the first process (the xdist controller, whose environment its workers and the processes
    they start inherit, so that a second training run of a tiny agent copies the first's model) and removed by it
    when the session ends. A WHILEAI_CACHE set outside is used as it is."""
    import tempfile

    if not os.environ.get("WHILEAI_CACHE"):
        os.environ["WHILEAI_CACHE"] = tempfile.mkdtemp(prefix="whileai-tests-")
        _MADE_CACHE.append(os.environ["WHILEAI_CACHE"])


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for folder in _MADE_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


class _ModuleNeedingExtras(pytest.Module):
    """A test module that imports an optional install at its top: skipped, with the extra to install, where that
    install is missing (``pip install -e .`` without ``[dev]``); anything else that fails to import is an error."""

    def _getobj(self):
        try:
            return super()._getobj()
        except self.CollectError as error:
            missing = error.__cause__
            if isinstance(missing, MissingExtra):  # whileai's own guard (whileai.advantages without torch)
                pytest.skip(str(missing), allow_module_level=True)
            if not isinstance(missing, ModuleNotFoundError) or not missing.name:
                raise
            name = missing.name.partition(".")[0]
            if name == "whileai" or importlib.util.find_spec(name) is not None:
                raise
            extra = sys.modules["extras"].extra_for(name)
            if extra is None:
                raise
            reason = f"needs {name} (whileai-grpo[{extra}]; every test's: pip install -e '.[dev]')"
            pytest.skip(reason, allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if module_path.name == "conftest.py":
        return None
    return _ModuleNeedingExtras.from_parent(parent, path=module_path)


# The fast tier, what a developer runs between edits (``pytest -m fast -n 2``, under two minutes on two cores): the
# library's tests and the command line's, but those marked slow or gpu. The README's test line runs every tier.
FAST_FOLDERS = ("unit", "cli")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        folder = item.path.relative_to(tests).parts[0] if item.path.is_relative_to(tests) else ""
        if folder in FAST_FOLDERS and not any(item.get_closest_marker(m) for m in ("slow", "gpu")):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
