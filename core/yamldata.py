"""YAML read as data: every YAML file and override whileai reads goes through :func:`read_yaml`.

PyYAML's safe loader builds plain values only, but it lets an alias name a node many times, and nine lines of
aliases (a "billion laughs") name more values than a machine has memory for: the loader shares the objects, and the
first thing that walks them as a tree (validation, ``model_dump(mode="json")``, a YAML dump) runs out of memory.
:func:`read_yaml` composes the document, counts the values it expands to (each alias counted every time it is used,
in time linear in the document) and refuses one over ``YAML_EXPANDED_VALUES`` or one that contains itself, before
anything is built. Aliases within the limit (a block reused with ``<<: *defaults``) read as usual. Every refusal is
a ``BadInput`` naming the file, the line and the column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from whileai.defaults import YAML_DEEPEST, YAML_EXPANDED_VALUES, YAML_MOST_CHARACTERS
from whileai.errors import BadInput

__all__ = ["TooMuchYaml", "YamlBudget", "read_yaml", "read_yaml_file"]


class TooMuchYaml(BadInput):
    """YAML that expands to more values than it may: an alias bomb, one that contains itself, or parts past their
    shared budget."""


class YamlBudget:
    """The values several YAML documents may expand to together (a recipe, its includes and its overrides): each
    document's expanded size is counted against it as it is read, and the one that crosses it is refused by name.

    Example:
        >>> budget = YamlBudget(10)
        >>> read_yaml("[1, 2, 3, 4]", "recipe.yaml", budget=budget)
        [1, 2, 3, 4]
        >>> read_yaml("[1, 2, 3, 4, 5]", "override a", budget=budget)
        Traceback (most recent call last):
        ...
        whileai.yamldata.TooMuchYaml: override a: with what was read before it (the recipe, its includes, the overrides before it), the YAML comes to more than 10 values; write fewer, or split the run
    """  # noqa: E501

    def __init__(self, limit: int = YAML_EXPANDED_VALUES) -> None:
        self.limit = limit
        self.spent = 0

    def spend(self, values: int, where: str) -> None:
        self.spent += values
        if self.spent > self.limit:
            raise TooMuchYaml(
                f"{where}: with what was read before it (the recipe, its includes, the overrides before it), the YAML "
                f"comes to more than {self.limit} values; write fewer, or split the run"
            )


def read_yaml(text: str, where: str, limit: int = YAML_EXPANDED_VALUES, budget: YamlBudget | None = None) -> Any:
    """The data of one YAML document.

    Args:
        text: the document.
        where: what it is, for messages (a file's path, ``override trainer.seed``).
        limit: the most values (scalars, lists, mappings) the document may expand to, aliases followed.
        budget: the values this document shares with others read with it (``YamlBudget``), its size counted there.

    Raises:
        BadInput: not YAML, more than one document, an alias that expands past ``limit`` or contains itself;
            ``where`` with the line and column.

    Example:
        >>> read_yaml("base: &b {lr: 1}\\nrun: {<<: *b, steps: 2}", "recipe.yaml")
        {'base': {'lr': 1}, 'run': {'lr': 1, 'steps': 2}}
        >>> read_yaml("a: &a [1, 2]\\nb: [*a, *a, *a]", "bomb.yaml", limit=8)
        Traceback (most recent call last):
        ...
        whileai.yamldata.TooMuchYaml: bomb.yaml line 2, column 4: it comes to more than 8 values, aliases followed (a YAML alias bomb?); write fewer values, or use fewer aliases
    """  # noqa: E501
    if len(text) > YAML_MOST_CHARACTERS:  # refused before PyYAML spends a minute composing it
        raise TooMuchYaml(
            f"{where}: {len(text):,} characters of YAML, more than a recipe holds ({YAML_MOST_CHARACTERS:,})"
        )
    try:
        loader = yaml.SafeLoader(text)  # reads the first characters: a control character may be refused here
    except yaml.reader.ReaderError as err:
        raise BadInput(_unreadable(err, text, where)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _check_expansion(node, where, min(limit, budget.limit) if budget is not None else limit)
        if budget is not None:
            budget.spend(size, where)
        return loader.construct_document(node)
    except yaml.reader.ReaderError as err:
        raise BadInput(_unreadable(err, text, where)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise BadInput(f"{where}{_place(mark)}: not valid YAML ({problem})") from None
    except RecursionError:  # a document nested deeper than Python's stack
        raise BadInput(f"{where}: nested too deeply to read as data") from None
    except BadInput:
        raise
    except ValueError as err:  # a value Python will not hold: an integer of more than 4,300 digits
        raise BadInput(f"{where}: a value too large to read ({err})") from None
    finally:
        loader.dispose()


def read_yaml_file(path: Path, what: str = "", budget: YamlBudget | None = None) -> Any:
    """:func:`read_yaml` of a file, its unreadable cases named too (``what``: what the file is for, in messages;
    ``budget``: the values it shares with the documents read with it)."""
    named = f"{what} {path}" if what else str(path)
    if path.exists() and not path.is_file():  # a pipe would never end, a device never stop
        raise BadInput(f"{named}: not a regular file (a pipe, a device or a folder)")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{named}: no such file") from None
    except UnicodeDecodeError as err:
        raise BadInput(f"{named}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise BadInput(f"{named}: cannot read it ({err.strerror})") from None
    return read_yaml(text, named, budget=budget)


def _unreadable(err: yaml.reader.ReaderError, text: str, where: str) -> str:
    """A character YAML refuses (a control character, a NUL), placed by line and column."""
    position = max(0, min(int(err.position), len(text)))
    line, column = text.count("\n", 0, position) + 1, position - (text.rfind("\n", 0, position) + 1) + 1
    character = chr(err.character) if isinstance(err.character, int) else str(err.character)
    return f"{where} line {line}, column {column}: not valid YAML (character {character!a} is not allowed)"


def _place(mark: Any) -> str:
    return f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _check_expansion(root: yaml.Node, where: str, limit: int) -> int:
    """The values a node graph expands to, aliases followed; refused past ``limit``, or when it contains itself.

    Each node's expanded size is counted once (a depth-first walk of the composed graph, sizes kept by node), so the
    count costs time linear in the document however large the expansion it would make."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    if _depth(root) > YAML_DEEPEST:
        raise TooMuchYaml(f"{where}{_place(root.start_mark)}: nested more than {YAML_DEEPEST} levels deep")
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > limit:
                raise TooMuchYaml(
                    f"{where}{_place(node.start_mark)}: it comes to more than {limit} values, aliases followed (a "
                    "YAML alias bomb?); write fewer values, or use fewer aliases"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise TooMuchYaml(f"{where}{_place(node.start_mark)}: an alias that contains itself")
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise TooMuchYaml(f"{where}{_place(child.start_mark)}: an alias that contains itself")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _depth(root: yaml.Node) -> int:
    """How deep the node graph nests (an alias counted where it stands, each node walked once)."""
    deepest, seen, stack = 0, set(), [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if id(node) in seen or depth > YAML_DEEPEST:
            continue
        seen.add(id(node))
        stack += [(child, depth + 1) for child in _children(node)]
    return deepest


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
