"""Every third-party import of ``core/`` and ``cli/`` is declared in ``pyproject.toml``: in the base install when
``import whileai`` or a light command reaches it at module level, else in the extra that provides it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import extras

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for folder in ("core", "cli") for p in (REPO / folder).rglob("*.py"))

# Modules that stand behind an optional install as a whole, and the extra each needs: their own guard (or the one
# caller that imports them) names it. Every other module's top-level imports come from the base install.
BEHIND_AN_EXTRA = {
    "core/advantages": {"train", "fast"},  # whileai.advantages raises MissingExtra('torch', 'train') without torch
    "core/integrations/verl.py": {"verl"},  # imported inside a verl process, by the plugin below or a user
    "core/config/verl.py": {"verl"},  # verl's plugin entry point, loaded inside a verl process
    "core/integrations/trl_trainer.py": {"train"},  # imported by the training run after its MissingExtra check
    "core/training/callbacks.py": {"train"},  # imported by run_training, after its MissingExtra check
}


def third_party_imports(path: Path) -> list[tuple[str, bool, int]]:
    """(top-level name, imported at module level, line) of every import of a distribution outside the stdlib."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            root = name.partition(".")[0]
            if root not in sys.stdlib_module_names and root != "whileai":
                found.append((root, id(node) in top, node.lineno))
    return found


def _extras_of(path: Path) -> set[str] | None:
    relative = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.as_posix()
    for prefix, needed in BEHIND_AN_EXTRA.items():
        if relative == prefix or relative.startswith(prefix + "/"):
            return needed
    return None


def undeclared_imports(path: Path, declared: dict[str, set[str]]) -> list[str]:
    """Each third-party import of ``path`` that ``pyproject.toml`` does not declare where it is needed."""
    found = []
    behind = _extras_of(path)
    for name, module_level, line in third_party_imports(path):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{line} imports {name}"
        distribution = extras.distribution_of(name)
        declaring = declared.get(distribution) if distribution is not None else None
        if distribution is None:
            found.append(f"{where}: no installed distribution provides it")
        elif not declaring:
            found.append(f"{where}: {distribution} is not declared in pyproject.toml")
        elif module_level and behind is None and "" not in declaring:
            found.append(f"{where} at module level: {distribution} must be a base dependency")
        elif module_level and behind is not None and not ("" in declaring or declaring & behind):
            found.append(f"{where}: declare {distribution} in {sorted(behind)}")
    return found


def test_every_import_is_declared_where_it_is_needed() -> None:
    declared = extras.declared()
    found = [problem for path in SOURCES for problem in undeclared_imports(path, declared)]
    assert not found, "\n".join(found)


def test_the_table_names_modules_that_exist() -> None:
    for prefix in BEHIND_AN_EXTRA:
        assert (REPO / prefix).exists(), prefix


def test_an_undeclared_import_is_caught(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("import json\nimport pydantic\n\ndef f():\n    import pytest\n")
    found = third_party_imports(source)
    assert found == [("pydantic", True, 2), ("pytest", False, 5)]
    assert undeclared_imports(source, {"pydantic": {""}}) == [
        f"{source}:5 imports pytest: pytest is not declared in pyproject.toml"
    ]
    assert "" not in extras.declared()[extras.distribution_of("pytest")]  # pytest is dev-only: not a base import
