"""``whileai train`` as an 80-column terminal shows it: the output replayed through a terminal emulator (pyte), the
way tmux or a terminal draws it. The bar fits the width (nothing cut to an ellipsis), the table rows printed while
it is live go above it, and no copy of it is left on the screen."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("trl")
pyte = pytest.importorskip("pyte")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMALL = ["trainer.max_steps=6", "data.num_prompts=8", "spread.sample.prompts=4", "trainer.save_steps=6"]
BAR = re.compile(r"^step +\d+/\d+")


def _on_a_terminal(command: list[str], columns: int, rows: int, timeout: float) -> tuple[int, str]:
    """Run ``command`` on a pseudo-terminal of ``columns`` x ``rows`` (stdout and stderr both, as a terminal has
    them); its exit status and everything it wrote."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    written = bytearray()
    with child_processes.spawn(command, stdin=follower, stdout=follower, stderr=follower, env=env) as process:
        os.close(follower)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal closed: the command is done
                    break
                if not chunk:
                    break
                written += chunk
            elif process.poll() is not None:
                break
        status = process.wait(timeout=60)
    os.close(leader)
    return status, written.decode("utf-8", errors="replace")


def test_training_on_an_80_column_terminal_leaves_no_bar_behind_and_cuts_none(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "whileai.cli.main", "train", str(REPO / "recipes" / "tiny_cpu_gar.yaml")]
    status, written = _on_a_terminal([*command, *SMALL, f"output_dir={tmp_path / 'run'}"], 80, 60, timeout=600)
    assert status == 0, written[-3000:]
    screen = pyte.Screen(80, 60)
    stream = pyte.Stream(screen)
    drawn: list[str] = []  # every line of the bar as it was drawn, before the next redraw
    for chunk in re.split(r"(?=\r)", written):
        stream.feed(chunk)
        drawn += [line.rstrip() for line in screen.display if BAR.match(line)]
    assert drawn, "no bar was drawn"
    assert not [line for line in drawn if "\u2026" in line], drawn  # nothing cut to fit 80 columns
    assert any("pass " in line and "calls " in line and "fallbk " in line for line in drawn), drawn
    lines = [line.rstrip() for line in screen.display]
    assert not [line for line in lines if BAR.match(line)], lines  # the bar is gone at the end, no copy left
    rows = [line for line in lines if re.match(r"^ +[1-6] +\d\.\d{3} ", line)]
    assert len(rows) == 6, lines  # each step's row, whole and once
