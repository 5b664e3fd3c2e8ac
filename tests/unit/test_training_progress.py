"""The training progress callback: a live bar on a terminal, a table row per logging step."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from rich.console import Console

from whileai.training.callbacks import RichProgress


def state(step: int, main: bool = True) -> SimpleNamespace:
    return SimpleNamespace(is_world_process_zero=main, global_step=step, max_steps=3)


def test_rows_per_logging_step_and_a_bar_on_a_terminal() -> None:
    lines: list[str] = []
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    progress = RichProgress(lines.append, console=terminal)
    progress.on_train_begin(None, state(0), None)
    assert progress.bar is not None
    logs = {"reward": 0.5, "whileai/pass_rate": 0.5, "groupwise/grader_calls": 4.0, "groupwise/fallbacks": 1.0}
    progress.on_step_end(None, state(1), None)
    progress.on_log(None, state(1), None, logs=logs)
    progress.on_log(None, state(2), None, logs={**logs, "groupwise/fallbacks": 0.0})
    progress.on_train_end(None, state(3), None)
    assert lines[0].split() == ["step", "reward", "pass", "length", "calls", "fallbk", "hacks"]
    assert lines[1].split() == ["1", "0.500", "0.50", "4", "1"]
    assert progress.calls == 8 and progress.fallbacks == 1 and progress.bar is None


def test_no_bar_off_a_terminal_and_nothing_on_other_processes() -> None:
    lines: list[str] = []
    progress = RichProgress(lines.append, console=Console(file=io.StringIO(), force_terminal=False))
    progress.on_train_begin(None, state(0), None)
    assert progress.bar is None
    progress.on_log(None, state(1, main=False), None, logs={"reward": 1.0})
    progress.on_log(None, state(1), None, logs={"loss": 0.1})  # no reward: not a training log
    assert lines == []


def test_the_watch_s_stop_and_the_verifier_s_are_two_callbacks_transformers_takes_without_a_warning() -> None:
    import logging

    from transformers.trainer_callback import CallbackHandler
    from transformers.utils import logging as hf_logging

    from whileai.training.callbacks import StopAtCheckpoint, VerifierStop

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = hf_logging.get_logger("transformers.trainer_callback")
    logger.addHandler(handler)
    try:
        stops = [StopAtCheckpoint(lambda: False), VerifierStop(lambda: False, shared=True)]
        CallbackHandler(stops, model=None, processing_class=None, optimizer=None, lr_scheduler=None)
        CallbackHandler([*stops, StopAtCheckpoint(lambda: True)], None, None, None, None)
    finally:
        logger.removeHandler(handler)
    warned = [line for line in said if "already" in line]
    assert len(warned) == 1 and warned[0].count("StopAtCheckpoint") >= 1  # only a second of one class is warned of
