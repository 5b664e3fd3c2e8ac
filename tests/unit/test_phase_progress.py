"""The bars of the phases a user waits for show the count done and the rate, on a terminal only."""

from __future__ import annotations

import io
import time

from rich.console import Console

from whileai.progress import phase


def test_a_phase_shows_its_count_out_of_the_total_and_its_rate() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100, color_system=None)
    with phase("warm start", 4, "steps", console) as advance:
        for _ in range(4):
            time.sleep(0.02)
            advance(1)
    drawn = buffer.getvalue()
    assert "warm start" in drawn and "4/4 steps" in drawn and "steps/s" in drawn, drawn


def test_off_a_terminal_a_phase_draws_nothing() -> None:
    buffer = io.StringIO()
    with phase("sampling", 2, "groups", Console(file=buffer, force_terminal=False)) as advance:
        advance(2)
    assert buffer.getvalue() == ""
