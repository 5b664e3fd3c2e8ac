"""Every code block of the reference page runs against whileai and prints exactly what the page prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "spec" / "groupwise-grading.txt"
VENDORED = REPO / "tests" / "spec" / "groupwise-grading.txt"


def _page() -> str:
    return (SHARED if SHARED.exists() else VENDORED).read_text()


def _blocks() -> list[tuple[str, str]]:
    """(code, expected output) pairs: each python block and the text block after it."""
    fenced = re.findall(r"```(\w+)[^\n]*\n(.*?)```", _page(), re.S)
    pairs = []
    for (lang, code), (out_lang, expected) in zip(fenced[::2], fenced[1::2], strict=True):
        assert (lang, out_lang) == ("python", "text")
        pairs.append((code, expected))
    return pairs


def test_vendored_copy_matches_the_shared_page() -> None:
    if not SHARED.exists():
        pytest.skip("no shared/ beside this checkout")
    assert VENDORED.read_text() == SHARED.read_text()


def test_the_page_has_its_five_examples() -> None:
    assert len(_blocks()) == 5


def test_every_block_prints_what_the_page_prints() -> None:
    # The blocks share one namespace, as a reader running them in order would.
    namespace: dict[str, object] = {"__name__": "page"}
    for number, (code, expected) in enumerate(_blocks()):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"page-block-{number}", "exec"), namespace)
        assert out.getvalue() == expected, f"block {number}"
