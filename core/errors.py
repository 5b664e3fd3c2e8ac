"""The errors whileai raises on purpose, each tied to the command line's exit code.

Library callers catch them by class; ``whileai.cli`` maps ``exit_code`` to the process status and prints the
message on one line. A grader's misbehaviour during training is not an error at all: the group falls back and is
counted (``whileai.grading``).
"""

from __future__ import annotations

import functools
import re
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "DISTRIBUTION",
    "BadInput",
    "EndpointUnavailable",
    "GraderUnavailable",
    "MissingExtra",
    "NoSpread",
    "Recurring",
    "Terminated",
    "WhileaiError",
    "describe",
    "function_label",
    "json_problem",
    "needs_extra",
    "raised_line",
]


# The name whileai is installed under (its import name stays ``whileai``): the package index's ``whileai`` is another
# project, so every install line names this one.
DISTRIBUTION = "whileai-grpo"


class WhileaiError(Exception):
    """Base class; ``exit_code`` is the command line's status for it."""

    exit_code = 2


class NoSpread(WhileaiError, ValueError):
    """The spread gate found no spread (or too few scores to judge)."""

    exit_code = 1


class BadInput(WhileaiError, ValueError):
    """A recipe, rows file or argument that cannot be used; the message names the file, line or field."""

    exit_code = 2


class MissingExtra(WhileaiError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    exit_code = 3

    def __init__(self, module: str, extra: str | None, purpose: str = "", *, install: str | None = None) -> None:
        self.module = module
        self.extra = extra
        what = f" for {purpose}" if purpose else ""
        line = install or f"pip install '{DISTRIBUTION}[{extra}]'"  # a package no extra of whileai brings names its own
        super().__init__(f"{module} is not installed{what}: {line}")


@contextmanager
def needs_extra(extra: str, purpose: str) -> Iterator[None]:
    """Optional imports: one that fails inside this block is a ``MissingExtra`` naming the module, ``extra`` and
    ``purpose``.

    Example:
        >>> with needs_extra("plot", "drawing a run"):
        ...     import not_a_module_anyone_has
        Traceback (most recent call last):
        ...
        whileai.errors.MissingExtra: not_a_module_anyone_has is not installed for drawing a run: pip install 'whileai-grpo[plot]'
    """  # noqa: E501
    try:
        yield
    except ImportError as err:
        raise MissingExtra(err.name or extra, extra, purpose) from None


class GraderUnavailable(WhileaiError, RuntimeError):
    """The grader cannot be reached at all (for instance a judge endpoint down after every retry), or fails on
    (nearly) every group of a spread check."""

    exit_code = 4
    kind = "unreachable"  # how a group that falls back on it is counted


class EndpointUnavailable(WhileaiError, RuntimeError):
    """A policy or customer model endpoint gave no usable answer after its retries (down, refusing, timing out).
    The command line exits with 4, as for an unreachable judge."""

    exit_code = 4


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a job scheduler), raised where Ctrl-C raises: the command ends as Ctrl-C ends
    it (what the user's functions started ended, a run's folder marked interrupted), with 128 + SIGTERM."""

    exit_code = 143
    said = "SIGTERM"


class WatchStopped(WhileaiError, RuntimeError):
    """Training stopped at a checkpoint because the spread watch (``spread.watch.on_fail: stop``) failed
    ``patience`` checks in a row: the grader stopped telling the policy's passes apart, or broke."""

    exit_code = 5


class Recurring:
    """A count of something that can go wrong many times in a run (a verifier's failure, a late response), to be
    said the first time and then once in each hundred: a part that is broken shows at once, and one that fails now
    and then does not fill the log.

    Example:
        >>> late = Recurring()
        >>> [n for n in range(1, 251) if late.add()]
        [1, 100, 200]
        >>> late.add(120), late.count  # counted in a batch: said when the batch crosses a hundred
        (True, 370)
    """

    EVERY = 100

    def __init__(self) -> None:
        self.count = 0

    def add(self, times: int = 1) -> bool:
        """Count ``times`` more; whether now is a time to say it (the first, or a hundred crossed)."""
        before, self.count = self.count, self.count + times
        return before == 0 or before // self.EVERY != self.count // self.EVERY


def _code_of(function: object) -> tuple[str, Any]:
    """A user's function's name and code object (None for a callable without one), through partials and wrappers."""
    for _ in range(16):  # through partials and wrappers (functools.wraps) to the user's own function
        if isinstance(function, functools.partial):
            function = function.func
        elif getattr(function, "__wrapped__", None) is not None:
            function = function.__wrapped__  # type: ignore[attr-defined]
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    call = vars(type(function)).get("__call__")  # a callable object's method, where its code is
    return name, getattr(function, "__code__", None) or getattr(call, "__code__", None)


def function_label(function: object, line: int | None = None) -> str:
    """A user's function as a message names it: its name and where it is defined, or the ``line`` of its file that
    raised (:func:`raised_line`) (a ``functools.partial`` or a ``functools.wraps`` wrapper by the function it wraps; a
    callable object by its class).

    Example:
        >>> function_label(function_label).startswith("function_label (") and "errors.py, line " in function_label(
        ...     function_label)
        True
    """
    name, code = _code_of(function)
    return f"{name} ({code.co_filename}, line {line or code.co_firstlineno})" if code is not None else name


def raised_line(function: object, error: BaseException | None) -> int | None:
    """The innermost line of ``function``'s file in ``error``'s traceback (for an error from another process, in the
    traceback's text it carries as its cause), or None when none is there.

    Example:
        >>> def broken():
        ...     return {}["key"]
        >>> try:
        ...     broken()
        ... except KeyError as error:
        ...     raised_line(broken, error) == broken.__code__.co_firstlineno + 1
        True
    """
    code = _code_of(function)[1]
    if code is None or error is None:
        return None
    lines = [n for frame, n in traceback.walk_tb(error.__traceback__) if frame.f_code.co_filename == code.co_filename]
    text = str(error.__cause__ or "") if error.__cause__ is not None and not lines else ""
    lines += [int(n) for n in re.findall(rf'File "{re.escape(code.co_filename)}", line (\d+)', text)]
    return lines[-1] if lines else None


def describe(exc: BaseException) -> str:
    """An exception on one line, for a log or a record: its type and the first line of its message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def json_problem(error: BaseException) -> str:
    """What is wrong with a line of JSON, whole: the parser's message and the column (``json``'s message alone can
    end mid-sentence, "Invalid control character at"). Any other parser's error is its text.

    Example:
        >>> import json
        >>> try:
        ...     json.loads('["' + chr(9) + '"]')  # a raw tab inside a string
        ... except ValueError as exc:
        ...     json_problem(exc)
        'invalid control character at column 3'
    """
    import json

    if isinstance(error, json.JSONDecodeError):
        message = error.msg.removesuffix(" at")
        return f"{message[:1].lower()}{message[1:]} at column {error.colno}"
    return str(getattr(error, "msg", error))
