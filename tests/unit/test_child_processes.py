"""A test's child process and everything it started end when the test leaves them, a timeout included."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import child_processes
import pytest

PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended, only its parent has not read its status yet


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_leaving_the_block_by_an_error_ends_the_grandchild_too() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        with child_processes.spawn([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None
            grandchild = int(process.stdout.readline())
            assert _alive(grandchild)
            process.communicate(timeout=0.5)
    deadline = time.monotonic() + 30
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild) and process.returncode is not None


def test_run_is_subprocess_run_with_text_and_output() -> None:
    done = child_processes.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        child_processes.run([sys.executable, "-c", "raise SystemExit(3)"], check=True)
