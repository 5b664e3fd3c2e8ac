"""Shared fixtures: where the reference page lives."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_SPEC = REPO.parent / "shared" / "spec"
VENDORED_SPEC = REPO / "tests" / "spec"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
