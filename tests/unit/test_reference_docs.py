"""docs/recipe.md and docs/cli.md are what the schema and the commands give: a field or an option changed in the code
and not in its page fails here, naming the page and the command that rewrites it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from pydantic import Field

REPO = Path(__file__).resolve().parents[2]


def _generator():
    # pytest runs with --import-mode=importlib: the generator beside the tests is loaded by path under its own name.
    if "reference_docs" not in sys.modules:
        spec = importlib.util.spec_from_file_location("reference_docs", REPO / "tests" / "reference_docs.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["reference_docs"] = module
        spec.loader.exec_module(module)
    return sys.modules["reference_docs"]


def test_the_committed_pages_are_what_the_code_gives() -> None:
    generator = _generator()
    stale = generator.stale_pages()
    assert not stale, f"{', '.join(stale)}: not what the code gives; rewrite with `{generator.REGENERATE}`"


def test_a_field_added_to_a_section_is_a_row_of_its_table(tmp_path: Path) -> None:
    from whileai.config.schema import Recipe, WarmStartSection

    class Warmer(WarmStartSection):
        epochs: int = Field(3, ge=1, description="Passes over | the demonstrations.")

    class Changed(Recipe):
        comparison_arm: str | None = Field(None, description="Renamed arm.")

    page = _generator().recipe_page(Changed)
    assert page != (REPO / "docs" / "recipe.md").read_text()
    assert "| `comparison_arm` | str or null | `null` | Renamed arm. |" in page
    warmer = _generator()._table(Warmer, "model.warm_start")
    assert warmer[-1] == "| `epochs` | int, at least 1 | `3` | Passes over \\| the demonstrations. |"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "recipe.md").write_text(page)
    assert "docs/recipe.md" in _generator().stale_pages(tmp_path)


def test_every_section_the_recipe_reaches_has_its_table_in_declared_order() -> None:
    page = (REPO / "docs" / "recipe.md").read_text()
    headings = [line[3:] for line in page.splitlines() if line.startswith("## ")]
    for section in ("`grader.rule`", "`grader.judge`", "`grading`", "`spread.watch`", "`trainer`", "`model.lora`"):
        assert section in headings, section
    assert headings.index("`grading`") < headings.index("`spread`") < headings.index("`spread.watch`")
    judge = page.split("## `grader.judge`")[1].split("\n## ")[0]
    assert judge.index("| `base_url` |") < judge.index("| `answer_form` |")  # the endpoint's fields, then the judge's


@pytest.mark.parametrize("columns", ["40", "300"])
def test_the_command_page_does_not_follow_the_terminal(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("TERMINAL_WIDTH", columns)
    page = _generator().cli_page()
    assert page == (REPO / "docs" / "cli.md").read_text()
    from whileai.cli.main import COMMANDS

    for name, _, summary in COMMANDS:
        assert f"## `whileai {name}`\n\n{summary}\n" in page
