"""Output and errors for the command line: results on stdout, messages and progress on stderr, exit codes.

``guarded`` wraps a command: a ``WhileaiError`` (bad input, missing extra, grader unavailable, no spread) becomes
one line on stderr and its exit code, Ctrl-C one line and 130; ``whileai --debug`` adds the traceback and keeps the
exit code. Text the program did not write (paths, pydantic messages, ``whileai-grpo[train]``) is printed with Rich
markup off, so square brackets survive.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer

from whileai.cli import loading
from whileai.errors import BadInput, MissingExtra, Terminated, WhileaiError
from whileai.isolation import end_all
from whileai.progress import STDERR, TextConsole

__all__ = ["INTERRUPTED", "err", "guarded", "hack_note", "out", "print_json", "set_debug", "show_log", "stdout"]


class _Stdout:
    """The results stream: ``sys.stdout`` as it is at each write (a test runner swaps it), where a reader that went
    away (``whileai spread ... | head -2``) ends the output quietly instead of the command. What was done keeps its
    exit status (0 spread, 1 no spread): a closed pipe is never read as a verdict. The file descriptor is pointed at
    /dev/null once the pipe is gone, so Python's flush at exit has nothing to fail on."""

    closed_pipe = False

    def write(self, text: str) -> int:
        if not _Stdout.closed_pipe:
            try:
                sys.stdout.write(text)
            except BrokenPipeError:
                _pipe_gone()
        return len(text)

    def flush(self) -> None:
        if not _Stdout.closed_pipe:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                _pipe_gone()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def _pipe_gone() -> None:
    _Stdout.closed_pipe = True
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


stdout = _Stdout()
out = TextConsole(file=stdout, soft_wrap=True)  # every string shown as text (whileai.progress.TextConsole)
err = STDERR  # the one stderr console: messages printed while a progress bar is live go above it

_state = {"debug": bool(os.environ.get("WHILEAI_DEBUG"))}

F = TypeVar("F", bound=Callable[..., Any])


def set_debug(value: bool) -> None:
    _state["debug"] = value or bool(os.environ.get("WHILEAI_DEBUG"))


def is_debug() -> bool:
    return _state["debug"]


def print_json(data: Any) -> None:
    """One JSON object on stdout, nothing else on that stream."""
    stdout.write(json.dumps(data, default=str) + "\n")
    stdout.flush()


def hack_note(reward: float) -> str:
    """The table note of a confirmed hack, given the failure's reward it was set to."""
    return "hack (zeroed)" if reward == 0 else f"hack (a failure: R={reward:g})"


def say(message: str) -> None:
    """A message for the person at the terminal (stderr), markup off."""
    err.print(message, markup=False)


class _SayHandler(logging.Handler):
    """whileai's log lines, said as every message is (:func:`say`: a verifier's exception quoting a model's text is
    shown as text); warnings always, the rest under ``--verbose``."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        say(text if text.startswith("whileai: ") else f"whileai: {text}")


_LOG = _SayHandler(logging.WARNING)
logging.getLogger("whileai").addHandler(_LOG)


@contextlib.contextmanager
def show_log(shown: bool = True) -> Iterator[None]:
    """whileai's log lines on stderr while the block runs, when ``shown`` (``--verbose``): each retry and its wait, a
    judge's step down to a weaker answer form, the concurrency asked of a server. Their texts came from the server
    cleaned of secrets."""
    if not shown:
        yield
        return
    logger = logging.getLogger("whileai")
    level = logger.level
    _LOG.setLevel(logging.INFO)
    logger.setLevel(logging.INFO if level == logging.NOTSET else min(level, logging.INFO))
    try:
        yield
    finally:
        _LOG.setLevel(logging.WARNING)
        logger.setLevel(level)


def guarded(command: F) -> F:
    """Map whileai's errors to exit codes with one line on stderr; Ctrl-C is 130 with one line too.

    ``whileai --debug`` prints the traceback first and changes nothing else: the exit code is the same.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if signal.getsignal(signal.SIGINT) is loading:  # the console script: the command takes the signals now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, _terminated)
        try:
            return command(*args, **kwargs)
        except WhileaiError as error:
            _traceback_when_debugging()
            label = "missing install" if isinstance(error, MissingExtra) else "error"
            err.print(f"whileai: {label}: {_one_line(str(error))}")
            raise typer.Exit(error.exit_code) from None
        except ImportError as error:
            _traceback_when_debugging()
            name = getattr(error, "name", None) or str(error)
            err.print(f"whileai: missing install: {name} (pip install 'whileai-grpo[train]')", markup=False)
            raise typer.Exit(MissingExtra.exit_code) from None
        except KeyboardInterrupt as stop:
            _traceback_when_debugging()
            end_all()  # a call cut anywhere (between its fork and its wait) leaves nothing running
            err.print(f"whileai: interrupted ({getattr(stop, 'said', 'Ctrl-C')})", markup=False)
            raise typer.Exit(getattr(stop, "exit_code", INTERRUPTED)) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:
            _traceback_when_debugging()
            if isinstance(error, OSError) and error.filename is not None:
                # A full or read-only disk, a folder not writable: the file and the cause.
                err.print(f"whileai: error: {error.filename}: {error.strerror or error}", markup=False)
                raise typer.Exit(BadInput.exit_code) from None
            # Anything else reached here through input whileai did not foresee: one line, exit 2 (bad input), and
            # never 1, which a CI job reads as "no spread".
            text = str(error).strip().splitlines()[0] if str(error).strip() else ""
            hint = "" if is_debug() else " (rerun with whileai --debug for the traceback)"
            err.print(f"whileai: error: {type(error).__name__}: {text}{hint}")
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM (``timeout``, a job scheduler): the first ends the command as Ctrl-C does (``Terminated`` is a
    ``KeyboardInterrupt``), exit 143; a second, while that ends, ends the user's graders and verifiers with what they
    started (their children would otherwise outlive the command, holding its output pipes), then the command."""
    if _state.get("terminated"):
        end_all()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _state["terminated"] = True
    raise Terminated()


def _one_line(message: str) -> str:
    """An error's message on one line: a line break in the text it quotes (a key, a row's field, a file name) shown as
    ``\\n``, as the console shows the other characters a terminal obeys."""
    return message.replace("\r\n", "\\n").replace("\n", "\\n")


# The exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def _traceback_when_debugging() -> None:
    if is_debug():
        import traceback

        err.print(traceback.format_exc(), markup=False, end="")
