"""Process groups, commands and a llama.cpp server, as the benchmarks share them.

Every command and server a benchmark starts runs in its own process group, ended on every way out: a normal end, an
error, Ctrl-C, SIGTERM or SIGHUP (``with_signals``: exit 130 or 128 + the signal). ``open_server`` starts llama.cpp's
OpenAI-compatible server (``python -m llama_cpp.server`` from ``--server-python``, or ``--server-cmd``) on 127.0.0.1 on
a free port and waits until ``/v1/models`` answers, or uses one already up at ``--base-url``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Placeholders: {python} (--server-python), {model}, {host}, {port}, {n_ctx}.
DEFAULT_SERVER_CMD = "{python} -m llama_cpp.server --model {model} --host {host} --port {port} --n_ctx {n_ctx}"
HOST = "127.0.0.1"


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind (every ``finally`` ends its process group), then exit 128 + the signal.

    A ``KeyboardInterrupt``, because whileai's grading takes any other exception raised inside a grader (this one
    arrives wherever the main thread waits, a judge's call included) for the grader's failure: the group would fall
    back and the run go on.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while a process group is being ended, so a second Ctrl-C cannot cut the
    clean-up short; they are delivered when the block is left."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def end_group(process: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """SIGTERM to the process's group, SIGKILL after ``grace_s`` if it is still there, then reap the leader.

    SIGTERM first lets a model server free its memory and port; whatever the group started goes with it.
    """
    with signals_deferred():
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                break  # the group is gone
            try:
                process.wait(wait_s)
                if not group_alive(process.pid):
                    break
            except subprocess.TimeoutExpired:
                continue
        process.wait()


def group_alive(pgid: int) -> bool:
    """Whether any process is left in the process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------------- subprocesses


@dataclass
class Finished:
    """A command that ran to its end (or its timeout, ``returncode`` None)."""

    args: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


def run_in_group(args: Sequence[str], timeout_s: float, cwd: Path = REPO) -> Finished:
    """``args`` in a new session (its own process group), output captured, the group ended however this returns."""
    start = time.perf_counter()
    process = subprocess.Popen(
        list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            end_group(process, grace_s=5.0)
            stdout, stderr = process.communicate()
            code = None
        return Finished(list(args), code, stdout or "", stderr or "", time.perf_counter() - start)
    finally:
        end_group(process, grace_s=5.0)


def whileai_command(*args: str) -> list[str]:
    """The whileai CLI run by this interpreter (the module behind the ``whileai`` console script)."""
    return [sys.executable, "-m", "whileai.cli.main", *args]


# ---------------------------------------------------------------------------------------------------- the server


@dataclass
class Server:
    """A model server this benchmark started (``process`` set) or was given (``process`` None)."""

    url: str  # the base URL, up to /v1
    model_id: str  # what /v1/models names the model
    probes: dict[str, Any] = field(default_factory=dict)  # GET /props, /slots: status and body
    process: subprocess.Popen[Any] | None = None
    command: list[str] = field(default_factory=list)
    log_path: Path | None = None
    startup_s: float | None = None


def free_port() -> int:
    """A port nothing listens on now (the OS's pick; another process could take it before the server does)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def http_get(url: str, timeout_s: float = 10.0) -> tuple[int, str]:
    """GET ``url``: the status and the body's text (an error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def probe_routes(root: str) -> dict[str, Any]:
    """What the server answers to llama.cpp's ``/props`` and ``/slots``: status and body (JSON where it is)."""
    found: dict[str, Any] = {}
    for path in ("/props", "/slots"):
        try:
            status, text = http_get(root + path)
        except OSError as error:
            found[path] = {"error": str(error)}
            continue
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text[:300]
        found[path] = {"status": status, "body": body}
    return found


def server_command(template: str, python: str, model: str, port: int, n_ctx: int) -> list[str]:
    """``template`` with its placeholders filled, split as a shell would (nothing is run through a shell)."""
    values = {"python": python, "model": model, "host": HOST, "port": port, "n_ctx": n_ctx}
    return [part.format(**values) for part in shlex.split(template)]


def wait_ready(url: str, process: subprocess.Popen[Any] | None, timeout_s: float, log_path: Path | None) -> str:
    """Poll ``url``/models until it answers 200 and return the first model's id; fail early if the server exits."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it answered{log_tail(log_path)}")
        try:
            status, text = http_get(url + "/models", timeout_s=5.0)
            if status == 200:
                data = json.loads(text).get("data") or [{}]
                return str(data[0].get("id") or "model")
            last = f"HTTP {status}"
        except (OSError, ValueError) as error:
            last = str(error)
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer {url}/models within {timeout_s:.0f} s ({last}){log_tail(log_path)}")


def log_tail(log_path: Path | None, lines: int = 15) -> str:
    if log_path is None or not log_path.exists():
        return ""
    tail = log_path.read_text(errors="replace").splitlines()[-lines:]
    return "; the server's log ends:\n" + "\n".join(tail)


def start_server(
    template: str, python: str, model: str, n_ctx: int, log_path: Path, timeout_s: float, extra: Sequence[str] = ()
) -> Server:
    """Start the model server in its own process group on a free port, its output to ``log_path``, and wait until it
    serves. The group is ended if it does not come up."""
    port = free_port()
    command = server_command(template, python, model, port, n_ctx) + list(extra)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://{HOST}:{port}/v1"
        model_id = wait_ready(url, process, timeout_s, log_path)
        server = Server(url, model_id, probe_routes(f"http://{HOST}:{port}"), process, command, log_path)
        server.startup_s = time.perf_counter() - start
        return server
    except BaseException:
        end_group(process)
        raise


def open_server(args: argparse.Namespace, work: Path, say: Callable[[str], None]) -> Server:
    """The server at ``--base-url`` once it answers, or one started for ``--model`` (``--server-cmd``,
    ``--server-python``, ``--server-args``, ``--n-ctx``), its log in ``work``; said through ``say``."""
    if args.base_url:
        url = args.base_url.rstrip("/")
        root = url[: -len("/v1")] if url.endswith("/v1") else url
        return Server(url, wait_ready(url, None, args.server_timeout, None), probe_routes(root))
    server = start_server(
        args.server_cmd, args.server_python, str(args.model), args.n_ctx, work / "server.log", args.server_timeout,
        shlex.split(args.server_args),
    )  # fmt: skip
    assert server.process is not None
    say(f"server pid {server.process.pid} at {server.url}, ready in {server.startup_s:.1f} s ({server.model_id})")
    return server


def stop_server(server: Server) -> None:
    """End the server's process group (nothing to do for a server this benchmark did not start)."""
    if server.process is not None:
        end_group(server.process)


def add_server_options(parser: argparse.ArgumentParser, model_help: str) -> None:
    """The options of the llama.cpp server a benchmark starts (or finds at ``--base-url``), read by
    :func:`open_server`."""
    parser.add_argument("--model", required=True, help=model_help)
    parser.add_argument("--server-python", default=sys.executable, help="the python that has llama_cpp.server")
    parser.add_argument(
        "--server-cmd",
        default=DEFAULT_SERVER_CMD,
        help="the server's command line, placeholders {python} {model} {host} {port} {n_ctx} [%(default)s]",
    )
    parser.add_argument("--server-args", default="", help="more arguments for the server, e.g. '--chat_format gemma'")
    parser.add_argument("--base-url", default=None, help="a server already up (up to /v1): start none")
    parser.add_argument("--n-ctx", type=int, default=8192, help="the server's context size [8192]")
    parser.add_argument("--server-timeout", type=float, default=600.0, help="seconds the server may take to load")


def say_as(name: str) -> Callable[[str], None]:
    """A progress printer: each line to stderr, after ``name:``."""

    def say(text: str) -> None:
        print(f"{name}: {text}", file=sys.stderr, flush=True)

    return say


def with_signals(run: Callable[[], int], say: Callable[[str], None]) -> int:
    """``run()`` with SIGTERM and SIGHUP unwinding it as Ctrl-C does (every ``finally`` ends its process group);
    its exit code, or 130 / 128 + the signal / 2 on a ``RuntimeError``, said through ``say``."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, raise_interrupted)
    try:
        return run()
    except Interrupted as stop:
        say(f"stopped by signal {stop.signum}; the server and the commands are stopped")
        return 128 + stop.signum
    except KeyboardInterrupt:
        say("interrupted; the server and the commands are stopped")
        return 130
    except RuntimeError as error:
        say(f"error: {error}")
        return 2


def run_benchmark(args: argparse.Namespace, body: Callable[[argparse.Namespace, Path], int], name: str) -> int:
    """``body(args, work)`` in ``--work-dir`` (kept) or a temporary folder, under ``with_signals``."""
    say = say_as(name)

    def run() -> int:
        if args.work_dir is not None:
            args.work_dir.mkdir(parents=True, exist_ok=True)
            return body(args, args.work_dir)
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as work:
            return body(args, Path(work))

    return with_signals(run, say)
