"""One line per logging step while training: step, reward, pass rate, length, grader calls and fallbacks.

A ``transformers.TrainerCallback``; it replaces the trainer's own printer so the log reads as one table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

__all__ = ["RichProgress"]

_COLUMNS = (
    ("step", "step", "{:>5.0f}"),
    ("reward", "reward", "{:>7.3f}"),
    ("whileai/pass_rate", "pass", "{:>6.2f}"),
    ("completions/mean_length", "length", "{:>7.1f}"),
    ("groupwise/grader_calls", "calls", "{:>6.0f}"),
    ("groupwise/fallbacks", "fallbk", "{:>7.0f}"),
    ("groupwise/hacks_zeroed", "hacks", "{:>6.0f}"),
)


class RichProgress(TrainerCallback):
    """Prints the run's figures at each logging step (main process only)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.header_done = False

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return
        if not self.header_done:
            self.say("  ".join(f"{title:>{len(fmt.format(0))}}" for _, title, fmt in _COLUMNS))
            self.header_done = True
        values = {**logs, "step": state.global_step}
        cells = []
        for key, _, fmt in _COLUMNS:
            width = len(fmt.format(0))
            cells.append(fmt.format(values[key]) if key in values else " " * width)
        self.say("  ".join(cells))
