"""Which install brings an import: the distribution behind each import name and the extra of whileai that declares
it, read from the checkout's ``pyproject.toml``.

Used by the root conftest (a test module whose optional import is missing is skipped, naming the extra) and by
``tests/unit/test_dependencies.py`` (every third-party import of ``core/`` and ``cli/`` is declared).
"""

from __future__ import annotations

import importlib.metadata
import re
from functools import lru_cache
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

# Import names of the optional distributions, for an environment that does not hold them (the light install; verl
# runs in an environment of its own): an installed one is found in its metadata.
KNOWN = {
    name: name
    for name in (
        "torch",
        "trl",
        "transformers",
        "accelerate",
        "datasets",
        "pyarrow",
        "tokenizers",
        "matplotlib",
        "numba",
        "numpy",
        "orjson",
        "verl",
        "ray",
        "hypothesis",
    )
}
KNOWN["hydra"] = "hydra-core"


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@lru_cache(maxsize=1)
def declared() -> dict[str, set[str]]:
    """Each distribution whileai declares -> the extras declaring it (``""``: the base install)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    project = tomllib.loads(PYPROJECT.read_text())["project"]
    groups = {"": project["dependencies"], **project["optional-dependencies"]}
    found: dict[str, set[str]] = {}
    for extra, requirements in groups.items():
        for requirement in requirements:
            name = normalized(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0])
            found.setdefault(name, set()).add(extra)
    return found


@lru_cache(maxsize=1)
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distribution_of(module: str) -> str | None:
    """The distribution an import name comes from (None when neither installed nor known)."""
    installed = _installed().get(module)
    if installed:
        return normalized(installed[0])
    return KNOWN.get(module)


def extra_for(module: str) -> str | None:
    """The extra to install for an import name (``"dev"`` for a test tool, None when whileai declares none)."""
    distribution = distribution_of(module)
    if distribution is None:
        return None
    extras = declared().get(distribution, set())
    for extra in ("train", "fast", "plot", "parquet", "verl", "dev"):
        if extra in extras:
            return extra
    return next(iter(sorted(extras)), None) or None
