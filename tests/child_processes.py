"""Child processes of the tests, each in its own process group, the whole group ended on every way out.

A test that times out or fails must not leave a process behind: a benchmark's busy child, a launcher's workers, a
training run. ``run`` is ``subprocess.run`` (text, output captured, a timeout by default) and ``spawn`` a ``Popen``
for the ``with`` block; both start a new session and send SIGKILL to its group when they return or raise.

pytest runs with ``--import-mode=importlib``: ``tests/conftest.py`` registers this file as ``child_processes``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


def end_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL to the process's group (what it started is gone with it), then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    process.wait()


@contextmanager
def spawn(args: Sequence[str], **options: Any) -> Iterator[subprocess.Popen[Any]]:
    """``subprocess.Popen(args, **options)`` in a new session, its group ended when the block is left."""
    process = subprocess.Popen(args, start_new_session=True, **options)
    try:
        yield process
    finally:
        end_group(process)


def run(
    args: Sequence[str], *, timeout: float = 600, check: bool = False, capture_output: bool = True, **options: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in a new session: text, output captured, ``timeout`` seconds, the group ended after."""
    if capture_output:
        options.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    options.setdefault("text", True)
    with spawn(args, **options) as process:
        stdout, stderr = process.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(list(args), process.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done
