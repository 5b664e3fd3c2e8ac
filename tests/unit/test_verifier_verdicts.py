"""Nothing a verifier does stops a TRL step: every answer is read by one function (whileai.rows.verdicts), an answer
that is no reward makes its completion unscorable, a verifier that raises makes its batch unscorable, each counted
and logged. verl's side of the same reading is in tests/verl."""

from __future__ import annotations

import logging
import math
from decimal import Decimal

import numpy as np
import pytest

import whileai as wai
from whileai.grading.trl import binary_reward
from whileai.rows.verdicts import VerifierFailures, read_verdict, verdict_of

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("answer", "reward", "error"),
    [
        (1.0, 1.0, ""),
        (True, 1.0, ""),
        (np.float32(0.5), 0.5, ""),
        (np.bool_(False), 0.0, ""),
        (torch.tensor([0.25]), 0.25, ""),
        (Decimal(2), 2.0, ""),
        (None, math.nan, ""),
        ({"score": 1, "acc": True, "pred": "B"}, 1.0, ""),
        ({"score": None}, math.nan, ""),
        ({"acc": 1.0}, math.nan, "without 'score'"),
        ({"score": {"nested": 1}}, math.nan, "is a dict"),
        ({"score": "1"}, math.nan, "not a number"),
        ("1", math.nan, "not a number"),
        ([1.0], math.nan, "not a number"),
    ],
    ids=repr,
)
def test_every_answer_reads_as_a_reward_or_unscorable_with_its_reason(answer, reward, error) -> None:
    verdict = read_verdict(answer)
    assert (verdict.reward == reward) or (math.isnan(verdict.reward) and math.isnan(reward))
    assert (error in verdict.error) if error else verdict.error == ""
    assert verdict.fields == (dict(answer) if isinstance(answer, dict) else {})


def test_an_exception_is_a_verdict_too() -> None:
    verdict = verdict_of(lambda: {}["missing"])
    assert math.isnan(verdict.reward) and verdict.error == "it raised KeyError: 'missing'"


def test_failures_are_said_first_and_every_hundredth() -> None:
    said: list[str] = []
    failures = VerifierFailures(said.append)
    for _ in range(250):
        failures("it raised")
    failures("a batch", 60)
    assert failures.count == 310
    assert [line.split("(")[1].split(" ")[0] for line in said] == ["1", "100", "200", "310"]


def flaky(kind: str):
    """A TRL verifier (a batch function) that misbehaves as ``kind`` says."""

    def verifier(prompts, completions, **kwargs):
        if kind == "raises":
            raise ConnectionError("the sandbox went away")
        if kind == "short":
            return [1.0] * (len(completions) - 1)
        if kind == "not a list":
            return 1.0
        if kind == "generator raises":
            return (1.0 / (len(completions) - k) for k in range(len(completions) + 1))
        return [1.0, "passed", {"score": 1.0, "pred": "B"}, {"acc": 1}, None, 0.0, 1.0, 0.0][: len(completions)]

    return verifier


@pytest.mark.parametrize("arm", ["gar", "binary"])
@pytest.mark.parametrize(
    ("kind", "unscorable"), [("raises", 8), ("short", 8), ("not a list", 8), ("generator raises", 8), ("answers", 3)]
)
def test_a_misbehaving_verifier_leaves_its_completions_unscorable_and_the_step_going(
    arm, kind, unscorable, caplog
) -> None:
    grading = wai.GroupwiseGrading(lambda group: {"ranking": [g["index"] for g in group if g["passed"]]})
    verifier = flaky(kind)
    reward = grading.trl_reward(verifier, 4) if arm == "gar" else binary_reward(verifier, 4)
    logged: dict[str, float] = {}
    with caplog.at_level(logging.WARNING, logger="whileai.verifier"):
        shaped = reward(prompts=["p"] * 8, completions=list("abcdefgh"), log_metric=logged.__setitem__)
    assert len(shaped) == 8 and sum(math.isnan(value) for value in shaped) == unscorable
    assert logged["whileai/verifier_failures"] == (8 if unscorable == 8 else 2)  # "passed" and the dict without score
    assert "the verifier gave no reward" in caplog.text
    if kind == "answers":
        assert shaped[2] == shaped[2]  # a dict's score is its reward


def test_a_verifier_is_broken_after_three_batches_in_a_row_that_it_scored_none_of(tmp_path) -> None:
    """Three batches in a row with no reward (raising, answering None, timing out) break it; one scored completion
    resets the count. What it came to is said with the function, and the record keeps the kinds and the share."""
    from whileai.defaults import VERIFIER_BROKEN_BATCHES
    from whileai.grading.reference import load_callable
    from whileai.rows.verdicts import verifier_rewards

    assert VERIFIER_BROKEN_BATCHES == 3  # the number docs/training.md and the README say
    (tmp_path / "checks.py").write_text(
        "import time\n\n\ndef none(prompts, completions, **kwargs):\n    return [None] * len(completions)\n\n\n"
        "def down(prompts, completions, **kwargs):\n    raise ConnectionError('sandbox down')\n\n\n"
        "def hangs(prompts, completions, **kwargs):\n    time.sleep(60)\n\n\n"
        "def one(prompts, completions, **kwargs):\n    return [1.0] + [None] * (len(completions) - 1)\n"
    )
    none, down, hangs, one = (load_callable(f"{tmp_path / 'checks.py'}:{n}") for n in ("none", "down", "hangs", "one"))
    failures = VerifierFailures(lambda line: None, none)

    def batch(verifier) -> None:
        verifier_rewards(verifier, ["p"] * 2, ["a", "b"], {}, failures, timeout_s=1.0)

    batch(none), batch(none)
    assert not failures.broken
    batch(one)  # one completion scored: not broken, whatever the rest
    batch(down), batch(hangs)
    assert not failures.broken
    batch(none)
    assert (
        failures.broken
        and failures.why == f"none ({tmp_path / 'checks.py'}, line 4): it answered None for every completion"
    )
    batch(down)
    assert failures.broken and "it raised ConnectionError: sandbox down on a batch of 2" in failures.why
    assert failures.figures() == {
        "failures": 6, "kinds": {"ConnectionError": 4, "timeout": 2}, "first": failures.first, "unscored": 13,
        "completions": 14,
    }  # fmt: skip
    assert failures.first.startswith(f"none ({tmp_path / 'checks.py'}, line 9): it raised ConnectionError")
