"""The user's own functions (a grader, a verifier) run in a process of their own, so that nothing they do by mistake
can hang, kill or corrupt the run that calls them. It is no sandbox: the call runs as the same user, and one that
means to signal or kill its caller can.

A thread cannot hold such a call to a time limit: a backtracking ``re`` pattern or a long C call keeps the GIL, and
the thread watching the clock never runs; an answer read on the caller's side (a mapping whose ``__getitem__`` is
slow) has no limit at all. Here a call runs in a forked process and:

- its time limit holds whatever it does: past it the process is killed, with every process it started;
- its answer is turned into plain data (dicts, lists, numbers, strings; anything else an :class:`Opaque` standing for
  it) in that process, and read here whole within the same limit, so the caller never runs the user's code to read
  it nor waits on half an answer;
- what it prints goes to stderr, never into the caller's stdout (``whileai spread --json``);
- what it forks is ended when the call returns or is given up, and when the caller ends, ``kill -9`` included (the
  worker is the reaper of its orphans and is told of its parent's death, Linux; a call that keeps the GIL in C
  delays that until it lets go);
- ``sys.exit`` and any exception come back as the call's error, with the traceback's text as its cause.

Two forms: :class:`Worker`, one long-lived process serving many calls of one function (a grader, called once a
group: a fork costs 20-90 ms in a training process, a call through a worker a fraction of a millisecond), and
:func:`call_in_fork`, one process for one call that sees the caller's state as it is now (a verifier, called once a
batch with TRL's keywords: environments and trainer state go in without pickling). What a function changes in its
own process is not seen by the caller: it returns what it means to be kept. Linux and macOS (``fork``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import numbers
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the pipes and ctypes load when a worker starts, not with the grading object
    from multiprocessing.connection import Connection

__all__ = [
    "CallTimeout",
    "Opaque",
    "RemoteError",
    "RemoteTraceback",
    "Worker",
    "adopted",
    "call_in_fork",
    "end_all",
    "plain",
    "wait_for_any",
]

# prctl options (linux/prctl.h): a signal at the parent's death; adopt orphaned descendants (+1: is it set).
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_DEPTH = 100  # the deepest answer read; deeper is an answer nobody meant


class CallTimeout(TimeoutError):
    """A call that did not answer within its time limit (its process and what it started were killed)."""


class RemoteTraceback(Exception):
    """The traceback of an error raised in the worker process, as text (the cause of the error handed back)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Opaque:
    """What stands in an answer for an object that is not plain data: its type's name and a short ``repr``."""

    def __init__(self, kind: str, shown: str) -> None:
        self.kind, self.shown = kind, shown

    def __repr__(self) -> str:
        return self.shown

    def __reduce__(self) -> tuple[Any, ...]:
        return (Opaque, (self.kind, self.shown))


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as plain data: mappings as dicts, sequences (arrays and tensors by their ``tolist``) as lists, sets
    as sets, numbers as ``int`` or ``float``, strings, bytes, booleans and None as they are; anything else an
    :class:`Opaque`.

    Example:
        >>> import fractions
        >>> plain({"ranking": (2, [0, 1]), "factors": {0: fractions.Fraction(1, 2)}, "x": object})
        {'ranking': [2, [0, 1]], 'factors': {0: 0.5}, 'x': <class 'object'>}
    """
    if value is None or isinstance(value, (bool, str, bytes)):
        return value
    if depth > _DEPTH:
        raise ValueError(f"an answer nested more than {_DEPTH} deep")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, range)):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return {plain(v, depth + 1) for v in value}
    to_list = getattr(value, "tolist", None)
    if callable(to_list):  # numpy, torch, pandas: the list (or the number, for a 0-d array) they hold
        return plain(to_list(), depth + 1)
    if isinstance(value, Sequence):
        return [plain(v, depth + 1) for v in value]
    shown = repr(value)
    return Opaque(type(value).__name__, shown if len(shown) <= 200 else f"{shown[:197]}...")


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _become_worker() -> None:
    """In the forked process: a session of its own (the group killed with it), the reaper of its orphans, prints on
    stderr, the default signal handlers, and told of its parent's death by SIGHUP (:func:`_orphaned`)."""
    global _WORKER_PID, _PARENT_PID
    _WORKER_PID, _PARENT_PID = os.getpid(), os.getppid()
    os.setsid()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, _orphaned)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    os.dup2(2, 1)


def _orphaned(signum: int, frame: Any) -> None:  # pragma: no cover - runs in the worker
    """The parent died (``kill -9`` of the command): end what the calls started, then the worker. Linux sends the
    signal when the thread that forked ends, so a parent still there is no death. A call that keeps the GIL in C
    delays this until it lets go."""
    if os.getpid() != _WORKER_PID:
        os._exit(1)
    if os.getppid() != _PARENT_PID:
        _end_descendants()
        os._exit(1)


def _children(pid: int | str = "self") -> list[int]:
    """The live children of a process (Linux's /proc; none known elsewhere)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as listed:
                found += [int(child) for child in listed.read().split()]
    return found


def _end_descendants() -> None:
    """In the worker: kill what the call left running. Each killed child's own orphans come to the worker (its
    reaper) and are killed in the next round."""
    for _ in range(64):
        children = _children()
        if not children:
            return
        for child in children:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(OSError):
                os.waitpid(child, 0)


# The processes this one forked for calls and has not ended yet: ended with everything they started by
# :func:`end_all` (the command line's SIGTERM), which a dying parent's own death cannot do for their descendants.
_LIVE: set[int] = set()
_OWNER = os.getpid()  # a fork of this process that exits through Python ends none of them
atexit.register(lambda: os.getpid() == _OWNER and end_all())


@contextlib.contextmanager
def adopted() -> Iterator[None]:
    """The processes the block starts in this process (a user's module that forks at import), the daemons they
    detach included (this process is the reaper of orphans while the block runs), are ended with what
    :func:`end_all` ends: at the command's end, or when it is interrupted."""
    before, reaper = set(_children()), _is_reaper()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        _prctl(_PR_SET_CHILD_SUBREAPER, reaper)  # a process that was a reaper already (a launcher's) stays one
        _LIVE.update(child for child in _children() if child not in before)


def _is_reaper() -> int:
    """1 when this process is the reaper of its orphans already, else 0 (Linux; 0 elsewhere)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    flag = ctypes.c_int(0)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER + 1, ctypes.byref(flag), 0, 0, 0)
    return flag.value


def end_all() -> None:
    """End every worker and forked call of this process, and what :func:`adopted` kept, with what they started: at
    this process's exit, and when the command line is interrupted."""
    for pid in list(_LIVE):
        _kill(pid)


def _state(pid: int) -> str:
    """A process's state letter (``T`` stopped, ``Z`` a zombie); ``X`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "X"


def _freeze(found: list[int]) -> None:
    """Stop the processes in ``found`` and every descendant, each before its children are read (a stopped process
    forks nothing and its orphans come to a live reaper), adding each to ``found`` as it is found."""
    todo = list(found)
    while todo:
        member = todo.pop()
        with contextlib.suppress(OSError):
            os.kill(member, signal.SIGSTOP)
        deadline = time.monotonic() + 0.2  # a process in an uninterruptible wait (a vfork) is not waited for
        while _state(member) not in "TtZX" and time.monotonic() < deadline:
            time.sleep(0.0005)
        new = [child for child in _children(member) if child not in found]
        found += new
        todo += new


def _kill(pid: int) -> None:
    """From the caller: kill a worker, its process group and every descendant, frozen first so that none escapes
    to init between being found and being killed (and killed however the freezing ends), then reap it."""
    if pid not in _LIVE:  # ended and reaped already (a pid reaped may be another process's by now)
        return
    family = [pid]
    try:
        _freeze(family)
    finally:
        for member in reversed(family):
            with contextlib.suppress(OSError):
                os.kill(member, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        _LIVE.discard(pid)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


# The worker's own pid (a process a call forks runs on into the worker's code when the call returns or raises, and
# only the worker may answer on the pipe) and its parent's (:func:`_orphaned`).
_WORKER_PID = _PARENT_PID = 0


def _answer(call: Callable[[], Any]) -> tuple[bool, Any]:
    """``call()`` as what goes back: (True, its answer as plain data) or (False, the error as :func:`_portable`
    describes it). A process the call forked that comes back here ends at once, saying nothing."""
    try:
        outcome: tuple[bool, Any] = (True, plain(call()))
    except BaseException as error:  # sys.exit too: the call's error, not the worker's end
        outcome = (False, _portable(error))
    if os.getpid() != _WORKER_PID:
        os._exit(0)
    return outcome


def _portable(error: BaseException) -> tuple[str, str, tuple[Any, ...], str, str]:
    """An error as plain data: its type's module and name, its arguments (when plain), its ``kind`` (a judge call's),
    and the traceback's text. The caller rebuilds it without running the user's code (a class of theirs is never
    unpickled: its ``__init__`` may take other arguments, or not return)."""
    kind = getattr(error, "kind", "")
    try:
        args = tuple(plain(a) for a in error.args)
    except Exception:
        args = (str(error),)
    return (
        type(error).__module__,
        type(error).__qualname__,
        args,
        kind if isinstance(kind, str) else "",
        (traceback.format_exc()),
    )


class RemoteError(Exception):
    """An error a call raised in its process, of a type of the user's: its name, message, ``kind`` and traceback."""

    kind = ""


def _rebuilt(module: str, name: str, args: tuple[Any, ...], kind: str) -> BaseException:
    """The error :func:`_portable` described: Python's own and whileai's types as themselves, any other as a
    ``RemoteError`` under the same name (counted and said as the user raised it)."""
    if module == "builtins" or module.startswith("whileai."):
        found = getattr(sys.modules.get(module), name, None) if "." not in name else None
        # KeyboardInterrupt: the call raised it itself (a worker is in a session of its own, out of Ctrl-C's way).
        if isinstance(found, type) and issubclass(found, BaseException) and found is not KeyboardInterrupt:
            try:
                error = found(*args)
                if kind and not getattr(error, "kind", ""):
                    error.kind = kind  # type: ignore[attr-defined]
                return error
            except Exception:
                pass
    message = args[0] if len(args) == 1 and isinstance(args[0], str) else ", ".join(map(str, args))
    rebuilt = type(name.rpartition(".")[2] or "Error", (RemoteError,), {"kind": kind})(message)
    return rebuilt


def _send(connection: Connection, outcome: tuple[bool, Any]) -> None:
    try:
        connection.send(outcome)
    except Exception as problem:  # an answer that does not pickle (an Opaque always does): said as an error
        connection.send((False, _portable(problem)))


def _read(connection: Connection, deadline: float | None) -> Any:
    """One message from a call's process, whole by ``deadline`` (None: no limit), or a :class:`CallTimeout`: a call
    that wrote part of a message and stopped (a length and no more) holds no caller. The pipe is read without
    blocking, waiting in slices where it is empty, so that Ctrl-C is seen here at once. Raises EOFError when the pipe
    closes first."""
    import pickle
    import struct

    fd = connection.fileno()

    def take(size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            try:
                chunk = os.read(fd, size - len(data))
            except BlockingIOError:
                wait = _WAKE_S if deadline is None else min(_WAKE_S, deadline - time.monotonic())
                if wait <= 0:
                    raise CallTimeout(f"{len(data)} of {size} bytes of the answer came") from None
                connection.poll(wait)
                continue
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    os.set_blocking(fd, False)  # for this read only: the requests go out on the same socket, blocking
    try:
        (size,) = struct.unpack("!i", take(4))
        if size == -1:  # multiprocessing's header of a message over 2 GiB
            (size,) = struct.unpack("!Q", take(8))
        return pickle.loads(take(size))
    finally:
        os.set_blocking(fd, True)


def _how_it_ended(pid: int) -> str:
    """How a call's process that closed its pipe ended, reaped within a second: a SIGKILL no one here sent is most
    often the kernel's, for memory (the OOM killer, a cgroup's limit). Empty when it has not ended."""
    deadline = time.monotonic() + 1.0
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return ""
        if done:
            break
        if time.monotonic() > deadline:
            return ""
        time.sleep(0.005)
    _LIVE.discard(pid)
    with contextlib.suppress(OSError):  # what it started in its group goes with it
        os.killpg(pid, signal.SIGKILL)
    if os.WIFSIGNALED(status):
        killed = os.WTERMSIG(status)
        likely = ", likely for memory" if killed == signal.SIGKILL else ""
        return f"killed by {signal.Signals(killed).name}{likely}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _received(outcome: tuple[bool, Any]) -> Any:
    """The answer, or the error rebuilt with its traceback as its cause."""
    ok, value = outcome
    if ok:
        return value
    module, name, args, kind, trace = value
    error = _rebuilt(module, name, args, kind)
    if trace:
        error.__cause__ = RemoteTraceback(trace)
    return error


def _fork(body: Callable[[Connection], None]) -> tuple[int, Connection]:
    """A worker process running ``body`` on its end of a pipe; its pid and the caller's end."""
    from multiprocessing.connection import Pipe

    mine, theirs = Pipe()
    for stream in (sys.stdout, sys.stderr):  # nothing buffered here may be written twice
        with contextlib.suppress(Exception):
            stream.flush()
    with warnings.catch_warnings():  # Python 3.12 warns of fork in a threaded process: the child runs no thread
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the worker's side, measured by the tests through its effects
        code = 0
        _LIVE.clear()  # the caller's, not this process's to end
        try:
            mine.close()
            _become_worker()
            body(theirs)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    theirs.close()
    _LIVE.add(pid)
    return pid, mine


class Worker:
    """One process serving calls of ``function``, started when first asked and again after it was killed.

    It takes a list of requests at a time and answers each as its call returns, so that calls run back to back
    without a round trip between them; ``pending`` holds the requests not answered yet, the first of them the call in
    flight since ``started_call``.

    Args:
        function: what the worker calls: ``function(request)``, or ``function(*request)`` for requests sent with
            ``spread=True``.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.pid: int | None = None
        self.connection: Connection | None = None
        self.pending: list[int] = []  # the caller's numbers for the requests not answered yet
        self.started_call: float | None = None  # time.monotonic() when the first of them started

    def _serve(self, connection: Connection) -> None:  # pragma: no cover - runs in the worker
        function = self.function
        while True:
            try:
                spread, requests = connection.recv()
            except EOFError:  # the caller is gone
                _end_descendants()
                return
            for request in requests:
                call = functools.partial(function, *request) if spread else functools.partial(function, request)
                _send(connection, _answer(call))
                _end_descendants()

    def send(self, numbered: list[tuple[int, Any]], spread: bool = False) -> None:
        """Start calls on ``numbered`` requests, in order (the worker first, when there is none)."""
        if not numbered:
            return
        if self.pid is None:
            self.pid, self.connection = _fork(self._serve)
        assert self.connection is not None
        self.pending += [number for number, _ in numbered]
        self.started_call = time.monotonic()
        message = (spread, [request for _, request in numbered])
        try:
            self.connection.send(message)
        except (OSError, ValueError):  # the worker is gone: start another and send again
            self.kill()
            self.pid, self.connection = _fork(self._serve)
            self.pending = [number for number, _ in numbered]
            self.connection.send(message)

    def receive(self, deadline: float | None = None) -> tuple[int, Any]:
        """The number and the answer of the call in flight (its error in its place); the next call starts now. A
        worker that died, or whose answer is not whole by ``deadline`` (a :class:`CallTimeout`), is killed: it
        answers that error and is replaced on the next ``send``."""
        assert self.connection is not None and self.pending
        number = self.pending.pop(0)
        try:
            answer = _received(_read(self.connection, deadline))
            self.started_call = time.monotonic() if self.pending else None
        except CallTimeout as late:
            answer = late
            self.pending = self.kill()  # the rest stay, for the caller to send again
        except Exception as lost:  # the worker ended, or its pipe carried what no worker wrote
            how = (self.pid is not None and _how_it_ended(self.pid)) or type(lost).__name__
            answer = RuntimeError(f"the grader's process ended during the call ({how})")
            self.pending = self.kill()
        return number, answer

    def kill(self) -> list[int]:
        """End the worker and everything it started (the next call starts a new one); the numbers of the requests it
        had not answered."""
        if self.pid is not None:
            _kill(self.pid)
        if self.connection is not None:
            self.connection.close()
        left, self.pending = self.pending, []
        self.pid, self.connection, self.started_call = None, None, None
        return left


# The longest one wait lasts before this thread looks at its signals: Ctrl-C may be delivered to another thread, and a
# wait on the pipes alone would not end until an answer came.
_WAKE_S = 0.25


def wait_for_any(workers: list[Worker], timeout: float | None) -> list[Worker]:
    """The workers among ``workers`` whose answer has come, waiting at most ``timeout`` seconds (and at most
    ``_WAKE_S``: the caller loops) for one."""
    from multiprocessing.connection import wait

    by_connection = {id(w.connection): w for w in workers if w.connection is not None}
    waited = _WAKE_S if timeout is None else min(timeout, _WAKE_S)
    ready = wait([w.connection for w in workers if w.connection is not None], waited)
    return [by_connection[id(c)] for c in ready]


def call_in_fork(function: Callable[..., Any], timeout_s: float | None, /, **kwargs: Any) -> Any:
    """``function(**kwargs)`` in a process forked for this one call: it sees the caller's state as it is now, and
    what it returns comes back as plain data.

    Returns:
        The answer, or the error standing in for it: the call's exception (``SystemExit`` included), or a
        :class:`CallTimeout` when it ran past ``timeout_s`` (None: no limit).

    Example:
        >>> call_in_fork(lambda x: {"twice": (x, x)}, 5.0, x=2)
        {'twice': [2, 2]}
        >>> type(call_in_fork(lambda: time.sleep(5), 0.2)).__name__
        'CallTimeout'
    """

    def body(connection: Connection) -> None:  # pragma: no cover - runs in the worker
        _send(connection, _answer(lambda: function(**kwargs)))
        _end_descendants()

    pid, connection = _fork(body)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        return _received(_read(connection, deadline))
    except CallTimeout:
        return CallTimeout(f"no answer within {timeout_s:g} s")
    except Exception as lost:  # the process ended without an answer, or its pipe carried garbage
        how = _how_it_ended(pid) or type(lost).__name__
        return RuntimeError(f"the process of the call ended without an answer ({how})")
    finally:
        connection.close()
        _kill(pid)
