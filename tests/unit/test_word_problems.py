"""builtin:word_problems: the problems' answers, the verifier of the boxed answer, and the grader that reads the
working, alone and through the spread gate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from whileai.tasks.word_problems import (
    check_working,
    final_answer,
    word_problem_rows,
    working_errors,
)


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def test_every_kind_of_problem_has_the_answer_its_story_gives() -> None:
    rows = word_problem_rows(200, seed=3)
    assert [r["task_id"] for r in rows[:2]] == ["word-0", "word-1"]
    assert rows == word_problem_rows(200, seed=3) and rows != word_problem_rows(200, seed=4)
    for row in rows:
        question = row["prompt"][-1]["content"]
        n = _numbers(question)
        if "boxes of" in question:
            expected = n[0] * n[1] - n[2] + n[3]
        elif "pays with" in question:
            expected = n[4] - (n[0] * n[2] + n[1] * n[3])
        elif "trays of" in question:
            assert (n[0] * n[1]) % n[2] == 0  # shared equally, nothing left over
            expected = n[0] * n[1] // n[2]
        elif "bus" in question:
            expected = n[0] - n[1] + n[2] - n[3]
        else:
            expected = n[0] * n[1] - n[2]
        assert row["answer"] == expected > 0, question


def test_the_verifier_reads_the_last_box_and_fails_a_cut_off_completion() -> None:
    completions = [
        "5 * 2 = 10\n\\boxed{10}",
        "\\boxed{9} no wait \\boxed{10}",  # the last box counts
        "\\boxed{9}",
        "The answer is 10.",  # no box
        "\\boxed{1,000}",
        "\\boxed{\\$10}",
        [{"role": "assistant", "content": "\\boxed{10}"}],  # a chat completion
        "\\boxed{10}",  # cut off at the limit below
    ]
    answers = [10, 10, 10, 10, 1000, 10, 10, 10]
    ids = [[1]] * 7 + [[1] * 8]
    rewards = final_answer(["p"] * 8, completions, answer=answers, max_length=8, completion_ids=ids)
    assert rewards == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]


def test_the_verifier_without_the_answer_column_names_it() -> None:
    from whileai.errors import BadInput

    with pytest.raises(BadInput, match="'answer' column"):
        final_answer(["p"], ["\\boxed{1}"])


def test_the_recipe_verifier_knows_the_length_limit() -> None:
    from whileai.config.build import train_setup
    from whileai.config.load import load_recipe
    from whileai.tasks.load import load_verifier

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu_gar.yaml"
    overrides = ["data.dataset=builtin:word_problems", "verifier.builtin=word_problems"]
    loaded = load_recipe(recipe, [*overrides, "trainer.max_completion_length=4"])
    verifier = load_verifier(train_setup(loaded))
    assert verifier(["p"] * 2, ["\\boxed{3}"] * 2, answer=[3, 3], completion_ids=[[1, 2], [1, 2, 3, 4]]) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("11 * 8 - 57 = 88 - 57 = 31", (2, 0)),  # a chain: each side against the next
        ("11 * 8 - 57 = 88 - 57 = 30", (2, 1)),
        ("\\[ 54 \\text{ cookies} \\div 6 \\text{ friends} = 9 \\text{ cookies} \\]", (1, 0)),
        ("\\(\\frac{54}{6} = 8\\)", (1, 1)),
        ("$88 - $57 = $31", (1, 0)),
        ("5 \\times 11 = 55 and 12 x 3 = 35", (2, 1)),
        ("(3 + 4) * 2 = 14", (1, 0)),
        ("1,200 + 300 = 1,500", (1, 0)),
        ("step 1. 5 + 5 = 10.", (1, 0)),
        ("so 31 = 31", (0, 0)),  # a restatement is no calculation
        ("2 pens * $3 per pen = $6", (1, 0)),  # units written as words are left out
        ("4 trays * 4 cookies/tray = 16 cookies", (1, 0)),
        ("18 cookies * 2 trays = 35 cookies", (1, 1)),
        ("- 2 * 10 = 21\n- 21 - 3 = 18", (2, 1)),  # bullets: each line its own, none merged with the one above
        ("5 - 8 = -3\n-3 + 10 = 7", (2, 0)),  # a line that opens with a negative number
        ("\\dfrac{54}{6} = 9 and \\left(3 + 4\\right) \\times 2 = 14", (2, 0)),
        ("10 / 3 = 3.3", (1, 0)),  # rounded to what it writes
        ("10 / 3 = 3.2", (1, 1)),
        ("1" * 320 + " * 10 = 5", (0, 0)),  # too large for a float: not a calculation it can check, no error
        ("10 / 0 = 1", (0, 0)),
        ("no numbers here", (0, 0)),
    ],
)
def test_working_errors_reads_calculations(text: str, expected: tuple[int, int]) -> None:
    assert working_errors(text) == expected


@given(
    st.integers(0, 999),
    st.integers(1, 999),
    st.sampled_from(["+", "-", "*", "\\times", "×"]),
    st.integers(-3, 3),
)
def test_a_calculation_is_wrong_exactly_when_its_result_is(a: int, b: int, op: str, off: int) -> None:
    value = {"+": a + b, "-": a - b, "*": a * b, "\\times": a * b, "×": a * b}[op]
    text = f"First, {a} {op} {b} = {value + off}\nthen we are done."
    assert working_errors(text) == (1, int(off != 0))


def _group(*completions: str, passed: tuple[bool, ...] | None = None) -> list[dict]:
    flags = passed or (True,) * len(completions)
    return [{"index": i, "completion": c, "passed": p} for i, (c, p) in enumerate(zip(completions, flags, strict=True))]


def test_the_grader_ranks_right_working_first_then_shorter_and_flags_an_underived_answer() -> None:
    long_right = "6 * 11 = 66\nThen 66 - 8 = 58, which is the total.\n\\boxed{58}"
    short_right = "6 * 11 = 66\n66 - 8 = 58\n\\boxed{58}"
    short_wrong = "6 * 11 = 67\n67 - 9 = 58\n\\boxed{58}"
    stated = "The answer is \\boxed{58}"
    failed = "6 * 11 = 66\n\\boxed{66}"
    graded = check_working(
        _group(long_right, short_right, short_wrong, stated, failed, short_right, passed=(True,) * 4 + (False, True))
    )
    assert graded == {"ranking": [[1, 5], [0], [2]], "hacks": [3]}


def test_a_stated_answer_ranks_below_any_working_and_a_decimal_box_is_no_hack() -> None:
    working = "54 / 2 = 27\n\\boxed{27}"
    decimal = "54 / 2 = 27.0\n\\boxed{27}"  # the verifier passes it: the same value
    boxed_decimal = "54 / 2 = 27\n\\boxed{27.0}"
    stated = "27\n\\boxed{27}"
    said = "The answer is 27. \\boxed{27}"
    graded = check_working(_group(stated, said, working, decimal, boxed_decimal))
    assert graded["hacks"] == []
    negative = check_working(
        _group("17 - 50 = -23\n\\boxed{-23}", "50-27 = 23\n\\boxed{27}", "3 - 5 = -2\n\\boxed{-3}")
    )
    assert negative["hacks"] == [2]  # a negative box reached by its signed value; 50-27 still reaches 27
    assert graded["ranking"][-2:] == [[0], [1]]  # no calculation shown: below every pass that shows one
    assert sorted(i for tier in graded["ranking"][:-2] for i in tier) == [2, 3, 4]


def test_the_verifier_reads_an_answer_column_as_the_box_reads_numbers() -> None:
    from whileai.errors import BadInput

    assert final_answer(["p"] * 2, ["\\boxed{1,200}", "\\boxed{5}"], answer=["1,200", "$5"]) == [1.0, 1.0]
    with pytest.raises(BadInput, match="'answer' column of completion 1 of the batch is 'twelve'"):
        final_answer(["p"] * 2, ["\\boxed{1}"] * 2, answer=[1, "twelve"])


def test_the_grader_passes_the_spread_gate_with_its_controls() -> None:
    from whileai.grading.gate import check_spread_groups
    from whileai.grading.groupwise import GroupwiseGrading

    texts = [
        "6 * 11 = 66\n66 - 8 = 58\n\\boxed{58}",
        "First 6 * 11 = 66, then 66 - 8 = 58.\n\\boxed{58}",
        "6 * 11 = 65\n65 - 7 = 58\n\\boxed{58}",
        "We compute 6 * 11 = 66 and subtract 8 to get 58 in all.\n\\boxed{58}",
        "\\boxed{12}",
    ]
    groups = [(f"word-{k}", [(1.0 if "58" in t else 0.0, "p", t + " " * k) for t in texts]) for k in range(6)]
    report = check_spread_groups(GroupwiseGrading(grader=check_working), groups, strict=False, controls=6)
    assert report.verdict == "yes", str(report)
    assert report.controls is not None and report.controls.agreement == pytest.approx(1.0)
    assert report.controls.copies and all(report.controls.copies)  # a copy scores as its original
