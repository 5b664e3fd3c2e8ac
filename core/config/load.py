"""Reading a recipe: YAML, included blocks, ``key=value`` overrides, one validation.

The one precedence: built-in defaults < files included from ``configs/`` (in the order listed) < the recipe <
overrides on the command line. Overrides are parsed as YAML scalars (``trainer.learning_rate=1e-5``,
``grading.hack_zero=false``) and checked by the same models as the file. Every error is a ``BadInput`` that names the
file and the YAML path of the bad key, and says what is allowed.

This module reads YAML and validates; it imports no trainer and calls no grader.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from whileai.config.schema import Recipe
from whileai.config.trl_fields import GRPO_CONFIG_KINDS
from whileai.errors import BadInput
from whileai.http.secrets import MARK, masked_text
from whileai.yamldata import TooMuchYaml, YamlBudget, read_yaml, read_yaml_file

_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)$")

__all__ = [
    "LoadedRecipe",
    "config_dirs",
    "default_recipe",
    "is_override",
    "load_recipe",
    "parse_overrides",
    "resolve_path",
    "validate_recipe",
]


def resolve_path(base_dir: Path, relative: str) -> Path:
    """A path a recipe gives, made absolute against ``base_dir``, the recipe's folder (absolute paths stay)."""
    candidate = Path(relative).expanduser()
    return candidate if candidate.is_absolute() else (base_dir / candidate)


class LoadedRecipe:
    """A validated recipe with the folder its relative paths are resolved against.

    Attributes:
        recipe: the validated ``Recipe``.
        path: the recipe file (None for a recipe built from a mapping).
        base_dir: the folder relative paths in the recipe refer to.
        resolved: the merged mapping that was validated (includes, recipe and overrides).
    """

    def __init__(self, recipe: Recipe, path: Path | None, base_dir: Path, resolved: dict[str, Any]) -> None:
        self.recipe = recipe
        self.path = path
        self.base_dir = base_dir
        self.resolved = resolved

    def resolve(self, relative: str) -> Path:
        """A path from the recipe, made absolute against the recipe's folder (absolute paths stay)."""
        return resolve_path(self.base_dir, relative)

    def written(self) -> dict[str, Any]:
        """The resolved recipe as a run folder keeps it (``recipe.yaml``): defaults filled in, and every file it names
        (``Recipe.local_files``, and a local model folder) made absolute, since that copy is read from the run
        folder and from other working folders (``whileai spread RUN``, ``eval``, ``--resume``), where the relative
        paths would name nothing. A resume compares its recipe with the run's in this form."""
        data = self.recipe.model_dump(mode="json", exclude={"include"})
        for name, path in self.recipe.local_files(self.base_dir):
            *parents, last = name.split(".")
            section = data
            for part in parents:
                section = section[part]
            section[last] = section[last].replace(path, str(self.resolve(path).resolve()), 1)
        model = data.get("model") or {}
        if model.get("name_or_path") and Path(model["name_or_path"]).expanduser().is_dir():  # relative to the cwd
            model["name_or_path"] = str(Path(model["name_or_path"]).expanduser().resolve())
        return data

    def dump(self) -> str:
        """``written()`` as YAML."""
        return yaml.safe_dump(self.written(), sort_keys=False)


def config_dirs(base_dir: Path) -> list[Path]:
    """Where ``include`` names are looked up: beside the recipe, its ``../configs``, the shipped configs."""
    dirs = [base_dir, base_dir / "configs", base_dir.parent / "configs"]
    try:
        shipped = resources.files("whileai.configs")
    except ModuleNotFoundError:  # pragma: no cover - an install without shipped configs
        return dirs
    dirs.append(Path(str(shipped)))
    return dirs


def _read_yaml(path: Path, budget: YamlBudget) -> dict[str, Any]:
    if not path.is_file() and not path.exists():
        raise BadInput(f"{path}: no such recipe file")
    data = read_yaml_file(path, budget=budget)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a recipe is a mapping of sections, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: mappings merge key by key, anything else in ``top`` replaces ``base``."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _find_include(name: str, base_dir: Path, source: Path) -> Path:
    for folder in config_dirs(base_dir):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(d) for d in config_dirs(base_dir))
    raise BadInput(f"{source}: include {name!r} was not found (searched {searched})")


# The deepest key an override may set: the recipe's deepest setting is a few levels down.
_DEEPEST_KEY = 16


def parse_overrides(overrides: Iterable[str], budget: YamlBudget | None = None) -> dict[str, Any]:
    """``["a.b=1", "c=text"]`` -> ``{"a": {"b": 1}, "c": "text"}``, each value parsed as a YAML scalar, counted in
    ``budget`` with the recipe it overrides."""
    budget = budget if budget is not None else YamlBudget()
    result: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"override {_quoted(item)} is not key=value (e.g. trainer.learning_rate=1e-5)")
        try:
            value = read_yaml(raw, f"override {key.strip()}", budget=budget) if raw.strip() else None
        except TooMuchYaml:
            raise  # an alias bomb in one line, or one too many values, is no text value either
        except BadInput:
            value = raw
        if isinstance(value, str) and _FLOAT.match(value):
            value = float(value)  # YAML 1.1 reads 1e-5 (no dot) as a string
        node = result
        parts = key.strip().split(".")
        if len(parts) > _DEEPEST_KEY:  # no setting lies that deep; a deeper path would only exhaust the stack
            raise BadInput(f"override {_quoted(item)}: a key {len(parts)} levels deep (at most {_DEEPEST_KEY})")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BadInput(
                    f"override {_quoted(item)} sets a key under {part!r}, which another override set to a value"
                )
            node = child
        node[parts[-1]] = value
    return result


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed beside ``loc[-1]``; pydantic puts a union member's tag in ``loc`` (grader.scripted.rule)."""
    models: list[type[BaseModel]] = [Recipe]
    for part in loc[:-1]:
        tagged = [m for m in models if getattr(m.model_fields.get("kind"), "annotation", None) is not None]
        chosen = [m for m in tagged if part in get_args(m.model_fields["kind"].annotation)]
        if chosen and len(models) > 1:  # a union member's tag, not a field of the chosen member
            models = chosen
            continue
        models = [
            n for m in models if str(part) in m.model_fields for n in _models_in(m.model_fields[str(part)].annotation)
        ]
        if not models:
            return []
    return sorted({name for m in models for name in m.model_fields})


def _one_level_down(loc: tuple[Any, ...]) -> list[str]:
    """``section.key`` for every key one level below ``loc[-1]``'s siblings: where a key put one level too high
    belongs (``max_steps`` at the top is ``trainer.max_steps``). The trainer section's keys are TRL's."""
    found = []
    for name in _fields_at(loc):
        below = set(_fields_at((*loc[:-1], name, "_")))
        if not loc[:-1] and name == "trainer":
            below |= set(GRPO_CONFIG_KINDS)
        found += [f"{name}.{key}" for key in sorted(below)]
    return found


def _did_you_mean(key: str, loc: tuple[Any, ...], allowed: list[str]) -> str:
    """The hint of an unknown key: the closest allowed key beside it, else the one below a sibling section whose
    name is the key's (or closest to it); empty when nothing is close."""
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    deeper = {path.rpartition(".")[2]: path for path in reversed(_one_level_down(loc))}
    near = difflib.get_close_matches(key, list(deeper), n=1)
    if not near:
        return ""
    prefix = ".".join(str(p) for p in loc[:-1])
    return f"; did you mean {(prefix + '.' if prefix else '') + deeper[near[0]]!r}?"


def _format_error(error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc", ()))
    tags = ("scripted", "python", "judge")
    shown = tuple(p for i, p in enumerate(loc) if not (i == 1 and loc[0] == "grader" and p in tags))
    kind = error.get("type", "")
    if kind == "value_error" and not shown:
        # A cross-section check raised at the top level names its own fields in its message.
        return str(error.get("msg", "invalid")).removeprefix("Value error, ")
    path = ".".join(str(p) for p in shown) or "(top level)"
    if kind == "extra_forbidden":
        allowed = _fields_at(loc)
        hint = _did_you_mean(str(loc[-1]), loc, allowed)
        listing = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{path}: unknown key{hint}{listing}"
    message = str(error.get("msg", "invalid"))
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if kind == "missing":
        return f"{path}: required"
    if kind == "union_tag_not_found":  # no 'kind' key at all: a misspelt 'kind' gets the did-you-mean
        context = error.get("ctx") or {}
        tag = str(context.get("discriminator", "'kind'")).strip("'")
        given = [str(k) for k in error.get("input") or {}] if isinstance(error.get("input"), dict) else []
        close = difflib.get_close_matches(tag, given, n=1)
        hint = f"; {close[0]!r}: unknown key; did you mean {tag!r}?" if close else ""
        return f"{path}: {tag!r} is required (scripted, python or judge){hint}"
    if kind == "union_tag_invalid":  # a misspelt grader kind: the did-you-mean the other keys get
        context = error.get("ctx") or {}
        allowed = [t.strip().strip("'") for t in str(context.get("expected_tags", "")).split(",") if t.strip()]
        tag = str(context.get("tag", ""))
        close = difflib.get_close_matches(tag, allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{path}.kind: unknown kind {tag!r}{hint} (allowed: {', '.join(allowed)})"
    shown_input = error.get("input")
    if (
        "input" in error
        and not isinstance(shown_input, (dict, list))
        and kind not in ("model_type", "union_tag_invalid")
    ):
        got = masked_text(repr(shown_input))  # a URL's password is never echoed
        return f"{path}: {message} (got {got if len(got) <= 100 else got[:96] + '...' + got[-1]})"
    return f"{path}: {message}"


def validate_recipe(data: Mapping[str, Any], source: str, overrides: Iterable[str] = ()) -> Recipe:
    """Validate a merged mapping; a ``BadInput`` names every bad YAML path, and for each the override that set it
    (``override 'trainer.lr=1': ...``) or else ``source``."""
    try:
        return Recipe.model_validate(dict(data))
    except ValidationError as err:
        lines = []
        for error in err.errors():
            item = _override_behind(error, overrides)
            lines.append((f"override {_quoted(item)}" if item is not None else source, _format_error(error)))
        text = "; ".join(f"{where}: {line}" for where, line in lines)
        raise BadInput(text) from None


def _quoted(item: str, limit: int = 100) -> str:
    """An override as a message quotes it: a URL's password masked, a value past ``limit`` characters cut."""
    key, equals, _ = item.partition("=")
    if equals and _SECRET_KEY.search(key):  # a key typed where its variable's name belongs: never echoed
        item = f"{key}={MARK}"
    shown = masked_text(repr(item))
    return shown if len(shown) <= limit else f"{shown[: limit - 4]}...{shown[-1]}"


_SECRET_KEY = re.compile(r"(?:api[_-]?key|token|secret|password)$", re.IGNORECASE)


def _override_behind(error: Mapping[str, Any], overrides: Iterable[str]) -> str | None:
    """The ``key=value`` override that an error's YAML path (or the key it names) came from, if one did."""
    tags = ("scripted", "python", "judge")
    loc = [str(p) for i, p in enumerate(error.get("loc", ())) if not (i == 1 and p in tags)]
    where = ".".join(loc)
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    for item in overrides:
        key = item.partition("=")[0].strip()
        last = key.rpartition(".")[2]
        named = repr(last) in message or message.startswith(f"{last}:")  # a section's check names its field so
        if where and (key == where or (key.startswith(where + ".") and named)):
            return item
        if where and where.startswith(key + "."):
            return item
    return None


# A ``key=value`` override: a dotted YAML path, then '='. A rows path such as ``runs/a=b.jsonl`` is not one (a slash
# before the '=').
_OVERRIDE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*=")


def is_override(argument: str) -> bool:
    """Whether a command-line argument is a ``key=value`` override rather than a path.

    Example:
        >>> is_override("grader.judge.base_url=https://api.example.com/v1"), is_override("runs/a=b.jsonl")
        (True, False)
    """
    return _OVERRIDE.match(argument) is not None


def default_recipe(overrides: Iterable[str] = (), base_dir: Path | None = None) -> LoadedRecipe:
    """The built-in defaults as a recipe (a command given no ``--recipe``), with ``key=value`` overrides applied."""
    overrides = list(overrides)
    merged = parse_overrides(overrides)
    return LoadedRecipe(validate_recipe(merged, "defaults", overrides), None, base_dir or Path.cwd(), merged)


def load_recipe(path: str | Path, overrides: Iterable[str] = ()) -> LoadedRecipe:
    """Read, merge and validate a recipe file.

    Args:
        path: the recipe YAML.
        overrides: ``key=value`` strings, applied last.

    Raises:
        BadInput: a missing file, invalid YAML, an include that is not found, an unknown key or a bad value.
    """
    file = Path(path)
    base_dir = file.resolve().parent
    budget = YamlBudget()  # one for the recipe, its includes and its overrides together
    data = _read_yaml(file, budget)
    merged: dict[str, Any] = {}
    includes = data.get("include") or []
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise BadInput(f"{file}: include: a list of file names from configs/, got {includes!r}")
    for name in includes:
        block = _find_include(name, base_dir, file)
        included = _read_yaml(block, budget)
        if "include" in included:  # one level of includes: a nested one would be read by nobody
            raise BadInput(f"{block}: include: an included file includes no other; list them all in {file}")
        merged = _merge(merged, included)
    merged = _merge(merged, {k: v for k, v in data.items() if k != "include"})
    overrides = list(overrides)
    merged = _merge(merged, parse_overrides(overrides, budget))
    recipe = validate_recipe(merged, str(file), overrides)
    return LoadedRecipe(recipe, file, base_dir, merged)
