"""The complexity budget of ``../shared/STYLE.md``, held: no module of ``core/`` or ``cli/`` over 600 lines, no
function over 80 unless a comment on the line above says why, and ``benchmarks/README.md`` at most 250 lines."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for folder in ("core", "cli") for p in (REPO / folder).rglob("*.py"))
MODULE_LINES, FUNCTION_LINES, BENCHMARK_README_LINES = 600, 80, 250


def long_functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function over the budget that no comment above its ``def`` (or its first
    decorator) explains."""
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            explained = first >= 2 and lines[first - 2].lstrip().startswith("#")
            if length > FUNCTION_LINES and not explained:
                found.append((node.name, node.lineno, length))
    return found


def test_each_module_and_function_keeps_the_budget() -> None:
    found = []
    for path in SOURCES:
        name = path.relative_to(REPO)
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES:
            found.append(f"{name}: {lines} lines, over {MODULE_LINES}")
        found += [
            f"{name}:{line} {function}: {length} lines, over {FUNCTION_LINES}"
            for function, line, length in long_functions(path)
        ]
    assert not found, "\n".join(found)


def test_the_benchmarks_readme_keeps_its_budget() -> None:
    assert len((REPO / "benchmarks" / "README.md").read_text().splitlines()) <= BENCHMARK_README_LINES


def test_a_long_function_is_found_unless_a_comment_says_why(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    plain = tmp_path / "plain.py"
    plain.write_text(f"def long():\n{body}")
    assert long_functions(plain) == [("long", 1, FUNCTION_LINES + 1)]
    said = tmp_path / "said.py"
    said.write_text(f"# long by its table of options\n@decorated\ndef long():\n{body}")
    assert long_functions(said) == []
