"""Loading a function named in a recipe: ``package.module:function`` or ``path/to/file.py:function``.

A path is resolved against the recipe's folder and loaded as a module under a private name, its folder on
``sys.path`` as ``python file.py`` has it (so that it imports the modules beside it); a dotted module is imported
normally. Every failure is a ``BadInput`` that names the reference and what went wrong.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whileai.errors import BadInput

__all__ = ["load_callable"]


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
            with contextlib.redirect_stdout(sys.stderr):  # what the module prints is never a command's result
                spec.loader.exec_module(module)
        except (Exception, SystemExit) as err:  # a sys.exit at import is the module's failure, not whileai's exit
            sys.modules.pop(name, None)
            raise BadInput(f"{what} {reference!r}: importing {path} failed: {type(err).__name__}: {err}") from err
        finally:
            sys.path.remove(folder)
            if folder not in sys.path:
                sys.path.append(folder)
    else:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                module = importlib.import_module(target)
        except ModuleNotFoundError as err:
            raise BadInput(f"{what} {reference!r}: no module named {err.name!r}") from err
        except (Exception, SystemExit) as err:
            raise BadInput(f"{what} {reference!r}: importing {target} failed: {type(err).__name__}: {err}") from err
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise BadInput(f"{what} {reference!r}: {target} has no attribute {part!r}")
        value = getattr(value, part)
    if not callable(value):
        raise BadInput(f"{what} {reference!r}: {attribute} is not callable")
    return value
