"""The import rules that keep whileai's layers apart, read from the source (every import, at any depth).

The library (what a TRL or verl user imports) imports nothing of the application (recipes, tasks, runs, reports, the
simulator, the command line), and no module outside the recipe's packages takes a loaded recipe. Ground floor:
``whileai.defaults`` and ``whileai.errors``. The pure math (``methods``, ``advantages``) stands on it alone; nothing in
the library imports the command line; the judge and the offline path do not import each other (both use the endpoint
client); the grading object imports no trainer side; no circle between packages; at most nine floors of imports; at most
eight modules loose in ``core/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("whileai", *parts))


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported whileai module, whether at module level) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [(name, id(node) in top) for name in names if name.startswith("whileai")]
    return found


MODULES = {module_name(p): p for p in CORE.rglob("*.py")}
GROUND = ("whileai.defaults", "whileai.errors")


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("package", ["whileai.methods", "whileai.advantages"])
def test_the_math_stands_on_the_ground_floor_alone(package: str) -> None:
    for module, path in MODULES.items():
        if not _within(module, package):
            continue
        for name, _ in imports(path):
            assert _within(name, package) or any(_within(name, g) for g in GROUND), f"{module} imports {name}"


def test_the_ground_floor_imports_nothing_of_whileai() -> None:
    for module in GROUND:
        assert imports(MODULES[module]) == [], module


LIBRARY = (
    "whileai.defaults", "whileai.errors", "whileai.stats", "whileai.progress", "whileai.yamldata",
    "whileai.isolation", "whileai.methods", "whileai.advantages", "whileai.rows", "whileai.http", "whileai.judge",
    "whileai.grading", "whileai.integrations",
)  # fmt: skip
APPLICATION = (
    "whileai.config", "whileai.tasks", "whileai.training", "whileai.reports", "whileai.simulations", "whileai.cli"
)  # fmt: skip


def test_every_module_is_library_or_application() -> None:
    for module in MODULES:
        assert module == "whileai" or any(_within(module, p) for p in LIBRARY + APPLICATION), module


def test_the_library_imports_nothing_of_the_application() -> None:
    """Lazy imports count: a library call that loads a recipe or the simulator would tie a TRL user to them."""
    for module, path in MODULES.items():
        if any(_within(module, package) for package in LIBRARY):
            for name, _ in imports(path):
                assert not any(_within(name, app) for app in APPLICATION), f"{module} imports {name}"


def test_a_loaded_recipe_stays_in_the_recipe_s_packages() -> None:
    """``LoadedRecipe`` is read in ``whileai.config`` and the commands; the rest takes what ``config.build`` made."""
    for module, path in MODULES.items():
        if not (_within(module, "whileai.config") or _within(module, "whileai.cli")):
            assert "LoadedRecipe" not in path.read_text(), module


def test_nothing_in_the_library_imports_the_command_line() -> None:
    for module, path in MODULES.items():
        for name, _ in imports(path):
            assert not _within(name, "whileai.cli"), f"{module} imports {name}"


@pytest.mark.parametrize(
    ("one", "other"), [("whileai.judge", "whileai.simulations"), ("whileai.simulations", "whileai.judge")]
)
def test_the_judge_and_the_offline_path_do_not_import_each_other(one: str, other: str) -> None:
    for module, path in MODULES.items():
        if _within(module, one):
            for name, _ in imports(path):
                assert not _within(name, other), f"{module} imports {name}"


def test_grading_imports_nothing_of_the_trainer_side() -> None:
    """``whileai.grading`` knows groups, answers and how TRL calls a reward function (``grading.trl``), and imports
    neither the trainers whileai builds (``whileai.integrations``) nor the training run: they import grading."""
    for module, path in MODULES.items():
        if not _within(module, "whileai.grading"):
            continue
        for name, _ in imports(path):
            assert not _within(name, "whileai.training"), f"{module} imports {name}"
            assert not _within(name, "whileai.integrations"), f"{module} imports {name}"


def test_the_page_s_defaults_path_re_exports_the_ground_floor() -> None:
    from whileai import defaults
    from whileai.simulations import defaults as page_defaults

    assert all(getattr(page_defaults, name) == getattr(defaults, name) for name in page_defaults.__all__)


def test_the_statistics_stand_on_nothing_of_whileai() -> None:
    assert imports(MODULES["whileai.stats"]) == []


def third_party(path: Path) -> set[str]:
    """The top-level packages a file imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    ("package", "rooms"),
    [
        ("matplotlib", ("whileai.reports.plots",)),
        # trl_fields reads GRPOConfig's fields when asked to regenerate its table (a test compares the two)
        (
            "trl",
            (
                "whileai.integrations.trl_trainer",
                "whileai.training",
                "whileai.config.trl_fields",
            ),
        ),
        ("transformers", ("whileai.integrations.trl_trainer", "whileai.training")),
        # tasks.load reads a recipe's data given as a datasets name, importing datasets only then
        ("datasets", ("whileai.integrations.trl_trainer", "whileai.training", "whileai.tasks.load")),
        ("aiohttp", ("whileai.http.transport",)),
        # verl's environment is not the main one: only its reward manager and verl's plugin entry point import it
        ("verl", ("whileai.integrations.verl", "whileai.config.verl")),
    ],
)
def test_each_heavy_library_has_its_rooms(package: str, rooms: tuple[str, ...]) -> None:
    for module, path in MODULES.items():
        if package in third_party(path):
            assert any(_within(module, room) for room in rooms), f"{module} imports {package}"


def package_of(module: str) -> str:
    """``whileai.grading.gate`` -> ``whileai.grading``; a module of the top level is its own package."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph() -> dict[str, set[str]]:
    """Package -> the whileai packages its modules import, every import counted (function-level too), the root
    ``whileai/__init__`` left out (its lazy names reach every package by design)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        if module == "whileai":
            continue
        source = package_of(module)
        for name, _ in imports(path):
            target = package_of(name)
            if target in MODULES and target != source and target != "whileai":
                graph.setdefault(source, set()).add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle between packages, as a path that comes back to its start."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for following in sorted(graph.get(path[-1], ())):
            if following == path[0]:
                found.append([*path, following])
            elif following not in path and following > path[0]:  # each circle once, from its smallest member
                walk([*path, following])

    for start in sorted(graph):
        walk([start])
    return found


def test_no_circle_between_packages() -> None:
    """Counting every import, lazy and type-only ones too."""
    assert cycles(package_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("above", ["whileai.config", "whileai.judge", "whileai.config.build", "whileai.training"])
def test_grading_stands_below_the_recipe_and_the_judge(above: str) -> None:
    for module, path in MODULES.items():
        if _within(module, "whileai.grading"):
            for name, _ in imports(path):
                assert not _within(name, above), f"{module} imports {name}"


def test_the_judge_imports_no_grading() -> None:
    for module, path in MODULES.items():
        if _within(module, "whileai.judge"):
            for name, _ in imports(path):
                assert not _within(name, "whileai.grading"), f"{module} imports {name}"


def floors() -> tuple[int, list[str]]:
    """The longest chain of imports between whileai's modules (every import counted, a circle of modules one
    floor), and that chain."""
    graph = {m: {resolved for name, _ in imports(p) if (resolved := _module_of(name)) not in (None, m, "whileai")}
             for m, p in MODULES.items() if m != "whileai"}  # fmt: skip
    reach = {m: _reachable(graph, m) for m in graph}
    floor_of = {m: frozenset({m, *(n for n in reach[m] if m in reach[n])}) for m in graph}  # a circle: one floor
    below = {f: {floor_of[d] for m in f for d in graph[m]} - {f} for f in set(floor_of.values())}
    depth: dict[frozenset[str], tuple[int, list[str]]] = {}

    def longest(floor: frozenset[str]) -> tuple[int, list[str]]:
        if floor not in depth:
            best = max((longest(f) for f in below[floor]), default=(0, []), key=lambda found: found[0])
            depth[floor] = (best[0] + 1, ["/".join(sorted(floor)), *best[1]])
        return depth[floor]

    return max((longest(f) for f in below), key=lambda found: found[0])


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for module in graph[todo.pop()] - seen:
            seen.add(module)
            todo.append(module)
    return seen


def _module_of(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_at_most_nine_floors_of_imports() -> None:
    count, chain = floors()
    assert count <= 9, " -> ".join(chain)


def test_at_most_eight_modules_loose_in_core() -> None:
    loose = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 8, loose


def test_import_whileai_offers_the_library_and_still_answers_the_simulator_s_names() -> None:
    import whileai
    from whileai.simulations.agents import seeded_agent

    for name in whileai.__all__[1:]:
        assert any(_within(whileai._LAZY[name], package) for package in LIBRARY), name
    assert whileai.seeded_agent is seeded_agent  # the reference page's wai.seeded_agent
    assert not set(whileai._SIMULATOR) & set(dir(whileai)) and "seeded_agent" not in whileai.__all__
