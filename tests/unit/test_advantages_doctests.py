"""Every docstring example of whileai.advantages runs and prints what it says, and ``import whileai`` stays free of
torch."""

from __future__ import annotations

import doctest
import importlib
import sys

import child_processes
import pytest

MODULES = ["scan", "returns", "groups", "turns", "critic", "mdp"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"whileai.advantages.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0


def test_import_whileai_does_not_import_torch():
    code = "import sys, whileai; assert 'torch' not in sys.modules; assert 'whileai.advantages' not in sys.modules"
    child_processes.run([sys.executable, "-c", code], check=True)
