"""Loading a function named in a recipe: ``package.module:function`` or ``path/to/file.py:function``.

A path is resolved against the recipe's folder and loaded as a module under a private name, its folder on
``sys.path`` as ``python file.py`` has it (so that it imports the modules beside it); a dotted module is imported
normally. Every failure is a ``BadInput`` that names the reference and what went wrong. An import is held to
``IMPORT_TIMEOUT_S`` (``WHILEAI_IMPORT_TIMEOUT_S``), and what it starts is ended with the command.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from whileai.defaults import IMPORT_TIMEOUT_S
from whileai.errors import BadInput
from whileai.isolation import adopted

__all__ = ["load_callable"]


class _ImportTimeout(BaseException):
    """Raised into an import past its limit: a BaseException, so that the module's own ``except Exception`` cannot
    keep it waiting."""


@contextlib.contextmanager
def _held(what: str, reference: str, module: object) -> Iterator[None]:
    """A user's module imported in the block: its prints on stderr (never a command's result), what it starts ended
    with the command (``whileai.isolation.adopted``), and, on the main thread (where a timer can interrupt it), a
    ``BadInput`` naming it when it takes longer than its limit."""
    limit = _import_limit()
    main = threading.current_thread() is threading.main_thread()
    timed = main and hasattr(signal, "setitimer")
    # A module may set its own handlers at import (ignore SIGINT, say): the command's are put back after it.
    kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)} if main else {}

    def late(signum: int, frame: Any) -> None:
        raise _ImportTimeout

    previous = signal.signal(signal.SIGALRM, late) if timed else None
    if timed:
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        with adopted(), contextlib.redirect_stdout(sys.stderr):
            yield
    except _ImportTimeout:
        raise BadInput(
            f"{what} {reference!r}: importing {module} did not finish within {limit:g} s: move work that waits (a "
            "server, a download, a loop) into the function, or set WHILEAI_IMPORT_TIMEOUT_S"
        ) from None
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        for number, handler in kept.items():
            if handler is not None:
                signal.signal(number, handler)


def _import_limit() -> float:
    """``WHILEAI_IMPORT_TIMEOUT_S`` when set (a number of seconds above 0), else ``IMPORT_TIMEOUT_S``."""
    given = os.environ.get("WHILEAI_IMPORT_TIMEOUT_S")
    if not given:
        return IMPORT_TIMEOUT_S
    try:
        limit = float(given)
    except ValueError:
        limit = math.nan
    if not 0 < limit < 1e9:
        raise BadInput(
            f"WHILEAI_IMPORT_TIMEOUT_S={given!r}: give the seconds a user's module may take to import (above 0)"
        )
    return limit


def load_callable(reference: str, base_dir: Path | None = None, what: str = "function") -> Callable[..., Any]:
    """The callable ``reference`` names.

    Raises:
        BadInput: a malformed reference, a missing file or module, a module that fails to import, a missing or
            non-callable attribute.
    """
    target, sep, attribute = reference.rpartition(":")
    if not sep or not target or not attribute:
        raise BadInput(f"{what} {reference!r}: expected 'module:function' or 'path/to/file.py:function'")
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise BadInput(f"{what} {reference!r}: no such file {path}")
        name = f"whileai_user_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a spec
            raise BadInput(f"{what} {reference!r}: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        # Its folder first while it is imported, as `python file.py` has it, then last: a module imported later by
        # the function (or by whileai) is found beside it unless an installed one has its name.
        folder = str(path.resolve().parent)
        sys.path.insert(0, folder)
        try:
            with _held(what, reference, path):
                spec.loader.exec_module(module)
        except BadInput:  # past its time limit, said
            sys.modules.pop(name, None)
            raise
        except (Exception, SystemExit) as err:  # a sys.exit at import is the module's failure, not whileai's exit
            sys.modules.pop(name, None)
            raise BadInput(f"{what} {reference!r}: importing {path} failed: {type(err).__name__}: {err}") from err
        finally:
            sys.path.remove(folder)
            if folder not in sys.path:
                sys.path.append(folder)
    else:
        try:
            with _held(what, reference, target):
                module = importlib.import_module(target)
        except BadInput:
            raise
        except ModuleNotFoundError as err:
            raise BadInput(f"{what} {reference!r}: no module named {err.name!r}") from err
        except (Exception, SystemExit) as err:
            raise BadInput(f"{what} {reference!r}: importing {target} failed: {type(err).__name__}: {err}") from err
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            close = difflib.get_close_matches(part, [n for n in dir(value) if not n.startswith("__")], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BadInput(f"{what} {reference!r}: {target} has no attribute {part!r}{hint}")
        value = getattr(value, part)
    if not callable(value):
        raise BadInput(f"{what} {reference!r}: {attribute} is not callable")
    return value
