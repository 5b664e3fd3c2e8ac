"""The graph of whileai's imports has no cycle: every ``whileai.*`` import in ``core/``, at module level and inside
functions, read from the source with ``ast``, with an edge to each package whose ``__init__`` an import runs on the
way. Imports under ``if TYPE_CHECKING:`` never run and are left out.

Run as a script (``python tests/unit/test_import_cycles.py``) it prints the graph's size and each cycle's imports with
their file and line.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"


def module_name(path: Path) -> str:
    parts = ("whileai", *path.relative_to(CORE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(CORE.rglob("*.py"))}


def _resolve(target: str) -> str | None:
    """The whileai module an import of ``target`` runs: the longest known module that ``target`` names."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target if target.startswith("whileai") else None


def imports_of(name: str) -> dict[str, int]:
    """The whileai modules ``name`` imports, each with the line of its first import."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    never_run = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for part in node.body
        for inner in ast.walk(part)
    }
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in never_run:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, from the module's package up
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # ``from whileai.a import b`` imports the module whileai.a.b when there is one, else a name of whileai.a
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            first = node.args[0] if node.args else None
            targets = [first.value] if isinstance(first, ast.Constant) and isinstance(first.value, str) else []
        else:
            continue
        for target in targets:
            module = _resolve(target)
            # Importing whileai.a.b runs whileai.a's __init__ first: an edge to every package on the way that is
            # not one of the importer's own (those are running already when a module of theirs is imported).
            while module is not None and module != "whileai" and not name.startswith(module + "."):
                if module != name and module in MODULES:
                    found.setdefault(module, node.lineno)
                module = module.rpartition(".")[0]
    return found


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan 1972): every cycle lies inside one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    return {name: imports_of(name) for name in MODULES}


def describe(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    lines = [f"cycle among {len(component)} modules:"]
    for v in component:
        where = MODULES[v].relative_to(CORE.parent)
        lines += [f"  {v} -> {w}  ({where}:{line})" for w, line in graph[v].items() if w in component]
    return "\n".join(lines)


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "\n".join(describe(graph, c) for c in found)


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    """The reader finds what a cycle check must find: an import inside a function, ``from package import module``."""
    graph = import_graph()
    assert "whileai.training.folder" in graph["whileai.reports.runs"]  # imported inside grading_summary
    assert "whileai.reports.plots" not in graph["whileai.reports.runs"]
    assert "whileai.reports.plots" not in graph["whileai.reports.experiments"]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


if __name__ == "__main__":
    graph = import_graph()
    print(f"{len(graph)} modules, {sum(len(targets) for targets in graph.values())} whileai imports")
    found = cycles(graph)
    print("\n".join(describe(graph, c) for c in found) if found else "no cycle")
    sys.exit(1 if found else 0)
