"""Progress bars on stderr for the phases a user waits for: the count done (out of the total, where known) and the
rate, drawn only on a terminal (a log file gets each phase's closing line from the code that runs it); and the
consoles everything is printed on (:class:`TextConsole`), which show every text as the text it is.

The warm start of a tiny agent, the spread gate's sampling of the initial model, a judge grading rows for
``whileai spread`` and the simulator's rollouts all use :func:`phase` or :func:`phase_bar`; training has its own bar
(``whileai.training.callbacks``). A bar can also show the rate of a counter kept elsewhere
(:class:`CounterRateColumn`: ``whileai spread`` shows a judge's completion tokens per second with it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

__all__ = ["STDERR", "CounterRateColumn", "RateColumn", "TextConsole", "phase", "phase_bar", "visible"]

# Characters a terminal obeys instead of showing: C0 controls but the line break and the tab, DEL, C1 controls (ESC
# starts the sequences that move the cursor, clear the screen or make a hyperlink), the bidirectional marks,
# overrides and isolates that make a line read otherwise than it is written, and the zero-width characters that
# hide text in plain sight (a URL, a name or a key that reads as another).
_OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def visible(text: str) -> str:
    """``text`` with every character a terminal would obey instead of show written as its escape (``\\x1b``).

    Example:
        >>> visible("done\\x1b[2J [bold]x[/bold]\\n")
        'done\\\\x1b[2J [bold]x[/bold]\\n'
    """
    return _OBEYED.sub(lambda match: ascii(match.group())[1:-1], text)


class TextConsole(Console):
    """A Rich console on which every string is shown as the text it is: no markup (``[/INST]`` in a prompt, a
    ``[link=...]`` in a judge's reply), no emoji codes, and the characters a terminal would obey shown escaped
    (:func:`visible`). Strings reach the screen through ``render_str`` (plain ``print`` and every table cell), so this
    is the one place untrusted text (rows, replies, file names, messages quoting them) is made safe to print; whileai
    styles its own words with ``Text`` and styles, never with markup."""

    def __init__(self, **options: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **options)

    def render_str(self, text: str, **options: Any) -> Text:
        options.update(markup=False, emoji=False)
        return super().render_str(visible(text), **options)


# The process's one stderr console: the command line prints its messages on it and every bar draws on it, so that a
# message printed while a bar is live goes above the bar. (Rich writes to the real stderr even while a bar on another
# console redirects it, and each such message leaves a copy of the bar behind on the screen.)
STDERR = TextConsole(stderr=True, soft_wrap=True)


def _rate(speed: float, unit: str) -> Text:
    shown = f"{speed:,.0f}" if speed >= 100 else f"{speed:.2f}" if speed < 10 else f"{speed:.1f}"
    return Text(f"{shown} {unit}/s", style="progress.data.speed")


class RateColumn(ProgressColumn):
    """How many ``unit`` a second, over Rich's recent window; where Rich has no estimate (it drops its window each
    time a task's total changes, as it does for a bar of groups sent so far), over the whole phase. Blank until
    something is done."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None and task.completed and task.elapsed:
            speed = task.completed / task.elapsed
        if speed is None:
            return Text("")
        return _rate(speed, self.unit)


class CounterRateColumn(ProgressColumn):
    """The rate of a counter the bar does not move, read at each refresh: its growth since the task started (or
    was reset) over the task's elapsed time; blank until it has grown.

    A judge's tokens arrive while a batch of groups is still out, so this moves between the bar's own updates.

    Example:
        >>> tokens = [0]
        >>> column = CounterRateColumn(lambda: tokens[0], "tokens")
        >>> column.unit
        'tokens'
    """

    def __init__(self, read: Callable[[], float], unit: str) -> None:
        super().__init__()
        self.read = read
        self.unit = unit
        self._since: tuple[float | None, float] = (None, read())  # (the task's start time, the count then)

    def render(self, task: Task) -> Text:
        now = self.read()
        started, base = self._since
        if started is None:
            self._since = (task.start_time, base)  # counted from before the task's first draw
        elif started != task.start_time:
            self._since = (task.start_time, now)  # the task was reset: count again from here
            return Text("")
        elapsed = task.elapsed
        grown = now - self._since[1]
        if not elapsed or grown <= 0:
            return Text("")
        return _rate(grown / elapsed, self.unit)


class _CountColumn(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        done = f"{task.completed:,.0f}"
        return Text(f"{done}/{task.total:,.0f} {self.unit}" if task.total is not None else f"{done} {self.unit}")


def phase_bar(
    label: str, unit: str, console: Console | None = None, columns: Sequence[ProgressColumn] = ()
) -> Progress:
    """The bar of one phase: ``label``, a bar, the count of ``unit`` and their rate, any further ``columns`` (a
    :class:`CounterRateColumn`), the time it has taken."""
    console = console or STDERR
    return Progress(
        SpinnerColumn(),
        TextColumn(label),
        BarColumn(bar_width=None),
        _CountColumn(unit),
        RateColumn(unit),
        *columns,
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
