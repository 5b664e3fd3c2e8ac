"""``builtin:word_problems``: short arithmetic word problems for a real instruct model, a verifier of the final answer,
and a grader that reads the working.

The task is single-turn: a story with two or three operations on small whole numbers, answered in writing with the
result in ``\\boxed{}``. The system prompt asks for one calculation a line and shows one worked example, so a small
instruct model (Qwen2.5-Coder-0.5B-Instruct, dequantised) passes some of its samples and fails others: it rambles in
LaTeX past the length limit, slips in an addition, or writes a Python program instead. Groups are mixed, and the
passes differ in how they got there.

- ``final_answer`` (the verifier, ``verifier.builtin: word_problems``): 1.0 when the last ``\\boxed{}`` holds the
  problem's answer and the completion finished before the length limit, else 0.0. It reads only the answer.
- ``check_working`` (the grader, ``grader.function: whileai.tasks.word_problems:check_working``): ranks the passes
  of a group by what the verifier does not read. Every calculation written as ``<numbers and operators> = <number>``
  is evaluated, line by line, units written as words left out; a pass that shows no calculation ranks below every
  pass that shows one, then a pass with fewer wrong calculations ranks first, and among equals the shorter one
  (fewer characters: the same answer for less text). A pass whose boxed answer appears nowhere in its text before
  the box is a confirmed hack: the answer was stated, not derived.

This module generates, parses and evaluates text; it runs nothing a completion contains (the calculations are
evaluated by a parser of numbers and the four operations, not by ``eval``).
"""

from __future__ import annotations

import ast
import itertools
import operator
import random
from collections.abc import Callable, Sequence
from typing import Any

import regex as re

from whileai.errors import BadInput
from whileai.rows.text import completion_text

__all__ = ["SYSTEM_PROMPT", "check_working", "final_answer", "word_problem_rows", "working_errors"]

SYSTEM_PROMPT = (
    "Solve the problem. Write one calculation per line, then the final answer as \\boxed{<number>}.\n\n"
    "Example: Tom has 2 bags of 10 nuts. He eats 3 nuts. How many nuts does Tom have now?\n"
    "2 * 10 = 20\n"
    "20 - 3 = 17\n"
    "\\boxed{17}"
)

_NAMES = ("Mia", "Sam", "Ava", "Leo", "Zoe", "Max", "Ivy", "Ben", "Noa", "Eli")
_THINGS = ("pencils", "apples", "stickers", "marbles", "books", "cards", "shells", "stamps")


def _boxes(rng: random.Random) -> tuple[str, int]:
    name, things = rng.choice(_NAMES), rng.choice(_THINGS)
    boxes, each, given, bought = rng.randint(3, 9), rng.randint(6, 15), rng.randint(2, 20), rng.randint(5, 30)
    question = (
        f"{name} has {boxes} boxes of {each} {things}. {name} gives away {given} {things} and then buys {bought} "
        f"more. How many {things} does {name} have now?"
    )
    return question, boxes * each - given + bought


def _change(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    pen, book, pens, books = rng.randint(2, 6), rng.randint(3, 9), rng.randint(2, 5), rng.randint(1, 4)
    cost = pen * pens + book * books
    bill = 50 if cost < 50 else 100
    question = (
        f"A pen costs {pen} dollars and a notebook costs {book} dollars. {name} buys {pens} pens and {books} "
        f"notebooks and pays with a {bill}-dollar bill. How many dollars of change does {name} get?"
    )
    return question, bill - cost


def _share(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    friends, each = rng.randint(2, 6), rng.randint(3, 9)
    trays = rng.choice([t for t in range(2, 7) if (friends * each) % t == 0] or [1])
    per_tray = friends * each // trays
    question = (
        f"{name} bakes {trays} trays of {per_tray} cookies and shares all of them equally among {friends} "
        f"friends. How many cookies does each friend get?"
    )
    return question, each


def _bus(rng: random.Random) -> tuple[str, int]:
    start = rng.randint(20, 45)
    off, on = rng.randint(3, 12), rng.randint(2, 15)
    off_again = rng.randint(2, start - off + on - 1)
    question = (
        f"A bus starts with {start} passengers. At the first stop {off} get off and {on} get on. At the second stop "
        f"{off_again} get off. How many passengers are on the bus now?"
    )
    return question, start - off + on - off_again


def _savings(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    weekly, weeks = rng.randint(4, 15), rng.randint(3, 8)
    spent = rng.randint(5, weekly * weeks - 1)
    question = (
        f"{name} saves {weekly} dollars a week for {weeks} weeks, then spends {spent} dollars on a game. How many "
        f"dollars does {name} have left?"
    )
    return question, weekly * weeks - spent


_KINDS: tuple[Callable[[random.Random], tuple[str, int]], ...] = (_boxes, _change, _share, _bus, _savings)


def word_problem_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` problems as chat prompts (the system prompt, then the question), each with its ``answer`` column
    (which TRL passes to the verifier) and a ``task_id``; the kinds of story take turns.

    Example:
        >>> row = word_problem_rows(1, seed=0)[0]
        >>> row["task_id"], row["prompt"][0]["role"], isinstance(row["answer"], int)
        ('word-0', 'system', True)
    """
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        question, answer = _KINDS[index % len(_KINDS)](rng)
        prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        rows.append({"prompt": prompt, "answer": answer, "task_id": f"word-{index}"})
    return rows


_BOXED = re.compile(r"\\boxed\{\s*\\?\$?\s*(-?[\d,]*\.?\d+)\s*\}")


def boxed_answer(text: str) -> float | None:
    """The number in the last ``\\boxed{}`` of ``text`` (commas and a dollar sign allowed), or None."""
    found = _BOXED.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def final_answer(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    max_length: int | None = None,
    **kwargs: Any,
) -> list[float]:
    """1.0 when the completion's last ``\\boxed{}`` holds its row's ``answer`` and it finished, else 0.0.

    A completion that ran into ``max_length`` tokens (TRL's ``completion_ids``) was cut off: it fails, whatever it
    boxed before the limit.

    Example:
        >>> final_answer(["p"] * 3, ["5 + 2 = 7\\n\\\\boxed{7}", "\\\\boxed{8}", "7"], answer=[7, 7, 7])
        [1.0, 0.0, 0.0]
    """
    if answer is None:
        raise BadInput("the word_problems verifier reads the rows' 'answer' column (builtin:word_problems)")
    ids = kwargs.get("completion_ids")
    rewards = []
    for index, (completion, wanted) in enumerate(zip(completions, answer, strict=True)):
        got = boxed_answer(completion_text(completion))
        cut_off = max_length is not None and ids is not None and len(ids[index]) >= max_length
        rewards.append(1.0 if got is not None and got == _answer(wanted, index) and not cut_off else 0.0)
    return rewards


def _answer(wanted: Any, index: int) -> float:
    """A row's ``answer`` as a number (``1,200`` and ``$5`` read as the box reads them); BadInput naming the row."""
    try:
        return float(str(wanted).replace(",", "").lstrip("$").strip())
    except ValueError:
        raise BadInput(
            f"the word_problems verifier: the 'answer' column of completion {index} of the batch is {wanted!r}, "
            "not a number"
        ) from None


# An arithmetic expression: numbers joined by the four operators, parentheses allowed; a chain of them joined by '='.
_NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_EXPRESSION = rf"(?:\(\s*)*{_NUMBER}(?:\s*\)*\s*[-+*/]\s*(?:\(\s*)*{_NUMBER}\s*\)*)*"
_CHAIN = re.compile(rf"(?<![\w.]){_EXPRESSION}(?:\s*=\s*{_EXPRESSION})+(?!\w|\.\d)")
# LaTeX and typography to plain arithmetic: units in \text{} dropped, \frac{a}{b} as (a)/(b), math delimiters and
# dollar signs removed, the multiplication and division signs as * and /.
_PLAIN = (
    (re.compile(r"\\(?:text|mathrm|mbox)\{[^{}]*\}"), ""),
    (re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}"), r"(\1)/(\2)"),
    (re.compile(r"\\(?:left|right)\b"), ""),
    (re.compile(r"\\[()\[\]]|\$"), " "),
    (re.compile(r"\\times|\\cdot|[×·]|(?<=\d)\s*x\s*(?=\d)"), " * "),
    (re.compile(r"\\div|÷"), " / "),
    # units written as words: "4 trays * 4 cookies/tray = 16 cookies" is 4 * 4 = 16
    (re.compile(r"(?<=[A-Za-z])/[A-Za-z]+"), ""),
    (re.compile(r"[A-Za-z]+"), " "),
)
_OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    """The value of an expression of numbers and the four operations; ValueError for anything else."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("not arithmetic")


def _value(expression: str) -> float | None:
    try:
        return _evaluate(ast.parse(expression.replace(",", "").strip(), mode="eval"))
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError, OverflowError):
        return None  # unbalanced parentheses, a stray sign: not a calculation this parser can check


def working_errors(text: str) -> tuple[int, int]:
    """``(calculations, wrong)``: the calculations ``text`` writes as ``expression = number`` and how many of them
    are wrong (the two sides differ by more than 0.01). A chain ``11 * 8 - 57 = 88 - 57 = 31`` is two calculations,
    each side against the next; ``\\times``, ``×``, ``x``, ``\\div``, ``\\frac{}{}``, units in ``\\text{}`` and
    dollar signs are read as arithmetic. An equality without an operator on either side (``x = 5``) is no
    calculation.

    Example:
        >>> working_errors("6 * 11 = 66\\n66 - 8 = 57\\nso 57 + 22 = 79 = 79")
        (3, 1)
        >>> working_errors("\\\\(5 \\\\times 11 \\\\text{ cards} = 55\\\\) and $88 - $57 = 31")
        (2, 0)
    """
    calculations = wrong = 0
    for line in text.splitlines():  # one line at a time: a line that opens with a sign or a bullet starts afresh
        plain = line
        for pattern, replacement in _PLAIN:
            plain = pattern.sub(replacement, plain)
        for chain in _CHAIN.finditer(plain):
            sides = chain.group(0).split("=")
            for left, right in itertools.pairwise(sides):
                if not re.search(r"\d\s*\)*\s*[-+*/]", left + " " + right):
                    continue  # 31 = 31: a restatement, not a calculation
                values = _value(left), _value(right)
                if values[0] is None or values[1] is None:
                    continue
                calculations += 1
                wrong += abs(values[0] - values[1]) > _tolerance(right)
    return calculations, wrong


def _tolerance(written: str) -> float:
    """How far a written result may be from the true value: 0.01, or half a unit of its last decimal when it has
    fewer than two (``10 / 3 = 3.3`` is right, rounded)."""
    decimals = re.fullmatch(r"\s*-?[\d,]*\.(\d+)\s*", written)
    return max(0.01, 0.5 * 10.0 ** -len(decimals.group(1))) if decimals else 0.01


def _derived(text: str) -> bool:
    """Whether the boxed answer's value appears in the working before the box, as a number of its own (``27.0``
    reaches a box of ``27``)."""
    found = list(_BOXED.finditer(text))
    if not found:
        return False
    last = found[-1]
    boxed = float(last.group(1).replace(",", ""))
    before = text[: last.start()].replace(",", "")
    # a sign read with its number: -23 reaches a box of -23, and 50-17 still reaches a box of 17
    numbers = (float(number) for number in re.findall(r"(?<![\d.])-?\d+(?:\.\d+)?(?!\d)", before))
    return any(value == boxed or (boxed >= 0 and -value == boxed) for value in numbers)


def check_working(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A grader of one group (advantage mode): the passes ranked by their working, those that show a calculation
    before those that show none, then fewest wrong calculations, then fewest characters, equal keys tied; a pass
    whose boxed answer its working never reaches is a hack.

    Example:
        >>> check_working([
        ...     {"index": 0, "passed": True, "completion": "6 * 11 = 66\\n66 - 8 = 58\\n\\\\boxed{58}"},
        ...     {"index": 1, "passed": True, "completion": "6 * 11 = 67\\n67 - 9 = 58\\n\\\\boxed{58}"},
        ...     {"index": 2, "passed": True, "completion": "It is 58.\\n\\\\boxed{58}"},
        ...     {"index": 3, "passed": True, "completion": "\\\\boxed{58}"},
        ...     {"index": 4, "passed": False, "completion": "\\\\boxed{12}"},
        ... ])
        {'ranking': [[0], [1], [2]], 'hacks': [3]}
    """
    keys: dict[tuple[bool, int, int], list[int]] = {}
    hacks = []
    for item in group:
        if not item["passed"]:
            continue
        text = completion_text(item["completion"])
        if not _derived(text):
            hacks.append(item["index"])
            continue
        calculations, wrong = working_errors(text)
        keys.setdefault((calculations == 0, wrong, len(text.strip())), []).append(item["index"])
    return {"ranking": [keys[key] for key in sorted(keys)], "hacks": hacks}
