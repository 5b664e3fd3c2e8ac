"""``whileai redistribute``: equation 3 as a calculator for one group, or over a JSONL file of graded groups."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from whileai.cli.console import guarded, hack_note, out, print_json, say, stdout
from whileai.defaults import GROUPWISE_CAP, GROUPWISE_HACK_ZERO, GROUPWISE_MIN_FACTOR
from whileai.errors import BadInput, json_problem


def _numbers(text: str, what: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--{what}: comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise BadInput(f"--{what}: every value must be a finite number, got {text!r}")
    return values


def _indices(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--{what}: comma-separated indices, got {text!r}") from None


def _factors(text: str) -> dict[int, float]:
    factors: dict[int, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        try:
            factors[int(key)] = float(value)
        except ValueError:
            raise BadInput(f"--factors: index=factor pairs like 0=1.0,1=0.5, got {part!r}") from None
        if not sep:
            raise BadInput(f"--factors: index=factor pairs like 0=1.0,1=0.5, got {part!r}")
    return factors


def _ranking(text: str) -> list[Any]:
    """``1,0,2`` best first; ``1,0=2`` ties 0 and 2; or JSON ``[1, [0, 2]]``."""
    if text.strip().startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise BadInput(f"--ranking: not valid JSON: {text!r}") from None
        if not isinstance(value, list):
            raise BadInput("--ranking: a JSON list, best first")
        return value
    ranking: list[Any] = []
    for part in text.split(","):
        try:
            tier = [int(x) for x in part.split("=")]
        except ValueError:
            raise BadInput(f"--ranking: indices best first, ties joined by '=' (1,0=2), got {part!r}") from None
        ranking.append(tier if len(tier) > 1 else tier[0])
    return ranking


def _grade(answer: dict[str, Any], rewards: list[float], knobs: dict[str, Any]):
    """One group through the same validation and math as training (GroupwiseGrading with a fixed answer)."""
    from whileai.grading import GroupwiseGrading

    try:
        grading = GroupwiseGrading(lambda group: answer, **knobs)
    except ValueError as error:  # "cap: Input should be ..." (whileai.grading.knobs.checked): named as the option
        knob, _, problem = str(error).partition(": ")
        raise BadInput(f"--{knob.replace('_', '-')}: {problem}") from None
    n = len(rewards)
    return grading.grade_group(rewards, [""] * n, [""] * n)


@guarded
def redistribute(
    rewards: Annotated[str | None, typer.Option(help="The group's rewards, e.g. 1,1,0,0.")] = None,
    factors: Annotated[str | None, typer.Option(help="Quality factors by index, e.g. 0=1.0,1=0.5.")] = None,
    ranking: Annotated[str | None, typer.Option(help="Passes best first; ties joined by '=' (1,0=2) or JSON.")] = None,
    hacks: Annotated[str | None, typer.Option(help="Confirmed hacks, e.g. 2,3.")] = None,
    cap: Annotated[float, typer.Option(help="Upper bound on lambda.")] = GROUPWISE_CAP,
    min_factor: Annotated[float, typer.Option(help="Factor of the worst-ranked pass.")] = GROUPWISE_MIN_FACTOR,
    hack_zero: Annotated[
        bool, typer.Option(help="Treat a confirmed hack as a failure (the lowest reward in its group, at most 0).")
    ] = GROUPWISE_HACK_ZERO,
    hack_reward: Annotated[
        float | None, typer.Option(help="The reward a confirmed hack gets instead of a failure's.")
    ] = None,
    input_file: Annotated[
        Path | None, typer.Option("--in", help="Batch mode: a JSONL file, one graded group a line.")
    ] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Batch mode: where to write the advantages.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Redistribute one group's advantages (equation 3) and show R, A, f, A' and lambda.

    Examples:

      whileai redistribute --rewards 1,1,0,0 --factors 0=1.0,1=0.5

      whileai redistribute --rewards 1,1,1,0 --ranking 1,0 --hacks 2

      whileai redistribute --in groups.jsonl --out advantages.jsonl

    A batch line is {"rewards": [...], "factors": {...}} or {"rewards": [...], "ranking": [...]}, with optional
    "hacks"; the output line adds "advantages", "lambda" and "fell_back" (with "reason").

    Exit codes: 0 ok; 2 bad input (a ranking, factor or hack that is not a pass of the group, named); 130
    interrupted (Ctrl-C).
    """
    knobs = {"cap": cap, "min_factor": min_factor, "hack_zero": hack_zero, "hack_reward": hack_reward}
    if input_file is not None:
        _batch(input_file, out_file, knobs)
        return
    if rewards is None:
        raise BadInput("give --rewards (one group) or --in FILE (batch mode)")
    if factors is not None and ranking is not None:
        raise BadInput("give --factors or --ranking, not both")
    values = _numbers(rewards, "rewards")
    if not values:
        raise BadInput("--rewards: at least one reward")
    answer: dict[str, Any] = {}
    if ranking is not None:
        answer["ranking"] = _ranking(ranking)
    else:
        answer["factors"] = _factors(factors) if factors else {}
    if hacks:
        answer["hacks"] = _indices(hacks, "hacks")
    group = _grade(answer, values, knobs)
    if group.failure == "unusable answer":  # the calculator's input, not a grader's: say what is wrong, and where
        reason = (group.reason or "").removeprefix("unusable answer: ")
        option = "--hacks" if reason.startswith("hack") else "--ranking" if ranking is not None else "--factors"
        raise BadInput(f"{option}: {reason}")
    # A is taken after confirmed hacks got a failure's reward, so a failure's A and A' agree as equation 3 says.
    effective = group.effective_rewards
    original = [r - sum(effective) / len(effective) for r in effective]
    if as_json:
        print_json(
            {
                "rewards": values,
                "effective_rewards": effective,
                "advantages_before": original,
                "factors": {str(k): v for k, v in group.factors.items()},
                "hacks": group.hacks,
                "advantages": group.advantages,
                "lambda": group.lam,
                "fell_back": group.reason is not None,
                "reason": group.reason,
            }
        )
        return
    _print_group(group, values, original, hack_zero)


def _print_group(group: Any, values: list[float], original: list[float], hack_zero: bool) -> None:
    """R, A, f and A' of each member, and lambda."""
    from whileai.methods import positive_passes

    table = Table(show_edge=False)
    for name in ("i", "R", "A", "f", "A'", "note"):
        table.add_column(name, justify="left" if name == "note" else "right")
    effective = group.effective_rewards
    kept = [i for i, ok in enumerate(group.passed) if ok and not (hack_zero and i in group.hacks)]
    moving = set(positive_passes(effective, kept))
    for i, reward in enumerate(values):
        factor = group.factors.get(i, 1.0) if group.passed[i] and i not in group.hacks else None
        if i in group.hacks and hack_zero:
            note = hack_note(effective[i])
        elif group.passed[i]:
            note = "pass" if i in moving else "pass, at or below the mean: not moved"
        else:
            note = "fail"
        shown = "" if factor is None else f"{factor:.3f}"
        table.add_row(str(i), f"{reward:g}", f"{original[i]:+.4f}", shown, f"{group.advantages[i]:+.4f}", note)
    out.print(table)
    out.print(f"lambda {group.lam:.4f}" + (" (capped)" if group.capped else ""), markup=False)
    if group.reason:
        say(f"whileai: fell back to the original advantages: {group.reason}")


def _batch(input_file: Path, out_file: Path | None, knobs: dict[str, Any]) -> None:
    if not input_file.is_file():
        raise BadInput(f"{input_file}: no such file")
    lines_out = []
    fell_back = 0
    with input_file.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{input_file} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise BadInput(f"{where}: not valid JSON ({json_problem(error)})") from None
            if not isinstance(record, dict) or "rewards" not in record:
                raise BadInput(f"{where}: missing field 'rewards'")
            values = record["rewards"]
            if (
                not isinstance(values, list)
                or not values
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            ):
                raise BadInput(f"{where}: field 'rewards' must be a non-empty list of numbers")
            answer = {k: record[k] for k in ("ranking", "factors", "hacks") if k in record}
            if "ranking" not in answer and "factors" not in answer:
                answer["factors"] = {}
            group = _grade(answer, [float(v) for v in values], knobs)
            fell_back += group.reason is not None
            lines_out.append(
                json.dumps(
                    {
                        **record,
                        "advantages": group.advantages,
                        "lambda": group.lam,
                        "fell_back": group.reason is not None,
                        "reason": group.reason,
                    }
                )
            )
    text = "\n".join(lines_out) + ("\n" if lines_out else "")
    if out_file is None:
        stdout.write(text)
        stdout.flush()
    else:
        out_file.write_text(text)
        say(f"whileai: wrote {len(lines_out)} group(s) to {out_file} ({fell_back} fell back)")
