"""Training progress: a Rich progress bar on a terminal, and one line per logging step in any case; and the stops the
spread watch and a broken verifier ask for.

The bar (stderr, only when it is a terminal) shows the step out of ``max_steps`` with the latest pass rate and the
run's grader calls and fallbacks so far, within 80 columns; each logging step also prints one table row (step,
reward, pass rate, length, grader calls, fallbacks, hacks), so a log file reads as a table. The bar draws on
``whileai.progress.STDERR``, where the command line's messages go too, so that they land above it. A
``transformers.TrainerCallback`` that replaces the trainer's own printer and tqdm bar.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback

from whileai.progress import STDERR

__all__ = ["RichProgress", "StopAtCheckpoint", "VerifierStop"]

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
    """Progress of a run on the main process: a live bar on a terminal, a table row per logging step."""

    def __init__(self, say: Callable[[str], None], console: Console | None = None) -> None:
        self.say = say
        self.console = console or STDERR
        self.header_done = False
        self.bar: Progress | None = None
        self.task: Any = None
        self.calls = 0.0
        self.fallbacks = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not self.console.is_terminal:
            return
        self.bar = Progress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(bar_width=None),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("", total=state.max_steps or None, completed=state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return
        self.calls += logs.get("groupwise/grader_calls", 0.0)
        self.fallbacks += logs.get("groupwise/fallbacks", 0.0)
        if self.bar is not None:
            # Short enough for the whole bar to fit 80 columns: the step's pass rate (the reward, for a 0/1
            # verifier) and the run's grader calls and fallbacks so far; the row below has the rest.
            passed = logs.get("whileai/pass_rate")
            description = (
                f"pass {_cell('{:.2f}', passed)}" if passed is not None else f"reward {_cell('{:.3f}', logs['reward'])}"
            )
            if "groupwise/grader_calls" in logs:
                description += f"  calls {self.calls:.0f}  fallbk {self.fallbacks:.0f}"
            self.bar.update(self.task, description=description)
        if not self.header_done:
            self.say("  ".join(f"{title:>{len(fmt.format(0))}}" for _, title, fmt in _COLUMNS))
            self.header_done = True
        values = {**logs, "step": state.global_step}
        self.say(
            "  ".join(
                _cell(fmt, values[key]) if key in values else " " * len(fmt.format(0)) for key, _, fmt in _COLUMNS
            )
        )


def _cell(fmt: str, value: Any) -> str:
    """A logged figure in its column's format; one that is no number (TRL logs None or NaN for a step whose rewards
    were all unscorable) as a dash of the column's width."""
    if isinstance(value, (int, float)) and value == value:
        return fmt.format(value)
    return "\u2013".rjust(len(fmt.format(0)))


class StopAtCheckpoint(TrainerCallback):
    """Ends training at a checkpoint once ``asked()`` says so, on every process: the spread watch's stop
    (``spread.watch.on_fail: stop``: each process reads the decision from the figures the grading process logged), or
    a verifier that scored none of ``VERIFIER_BROKEN_BATCHES`` batches in a row (``shared``: each process scores its
    own slice, so each tells the others)."""

    def __init__(self, asked: Callable[[], bool], shared: bool = False) -> None:
        self.asked, self.shared = asked, shared
        self.stopped_at: int | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        stop = self.asked()
        dist = sys.modules.get("torch.distributed")
        if self.shared and dist is not None and dist.is_available() and dist.is_initialized():
            import torch

            flag = torch.tensor([float(stop)], device=args.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = bool(flag.item())
        if stop and self.stopped_at is None:
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True


class VerifierStop(StopAtCheckpoint):
    """The stop for a verifier that scores nothing: a class of its own, as transformers warns of a second callback
    of a class it holds already."""
