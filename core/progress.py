"""Progress bars on stderr for the phases a user waits for: the count done (out of the total, where known) and the
rate, drawn only on a terminal (a log file gets each phase's closing line from the code that runs it).

The warm start of a tiny agent, the spread gate's sampling of the initial model, a judge grading rows for
``whileai spread`` and the simulator's rollouts all use :func:`phase`; training has its own bar
(``whileai.training.progress``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

__all__ = ["RateColumn", "phase", "phase_bar"]


class RateColumn(ProgressColumn):
    """How many ``unit`` a second, over Rich's recent window (blank until two updates have been seen)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("")
        shown = f"{speed:,.0f}" if speed >= 100 else f"{speed:.2f}" if speed < 10 else f"{speed:.1f}"
        return Text(f"{shown} {self.unit}/s", style="progress.data.speed")


class _CountColumn(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        done = f"{task.completed:,.0f}"
        return Text(f"{done}/{task.total:,.0f} {self.unit}" if task.total is not None else f"{done} {self.unit}")


def phase_bar(label: str, unit: str, console: Console | None = None) -> Progress:
    """The bar of one phase: ``label``, a bar, the count of ``unit`` and their rate, the time it has taken."""
    console = console or Console(stderr=True)
    return Progress(
        SpinnerColumn(),
        TextColumn(label),
        BarColumn(bar_width=None),
        _CountColumn(unit),
        RateColumn(unit),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


@contextmanager
def phase(label: str, total: int | None, unit: str, console: Console | None = None) -> Iterator[Callable[[int], None]]:
    """A bar for the ``with`` block; yields ``advance(n)``, to be called as ``n`` more ``unit`` are done.

    >>> with phase("warm start", 3, "steps") as advance:
    ...     for _ in range(3):
    ...         advance(1)
    """
    bar = phase_bar(label, unit, console)
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)
