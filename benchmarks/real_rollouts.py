"""Benchmark: graders measured on a real model's own rollouts, not the seeded agent's: the support scenarios played by
a GGUF instruct model served by llama.cpp, the reference read off what it did, then the shipped rules and the same
model as the judge through ``whileai judge-eval``.

What it does, in order:

1. starts llama.cpp's OpenAI-compatible server for ``--model`` (``benchmarks/processes.py``'s server handling: its own
   process group on a free port, ended on every way out), or uses ``--base-url``;
2. ``whileai simulate --agent model --tool-calls json --scenarios FAMILY --n N --num-scenarios S``: the model
   plays the agent (its bare JSON tool calls read as training reads them), each row's ``flaws``, ``quality`` and
   ``hack`` read off its transcript (``whileai.simulations.flaws``); the rollouts' figures are summarised (pass rate,
   tool calls, flaws among the passes, groups with two passes or more);
3. keeps the groups with two passes or more (the ones a grader grades) and runs ``whileai spread`` and
   ``whileai judge-eval`` on them for each grader: the built-in rule (fewest tool calls first), the scripted rule of
   ``recipes/refund_scripted.yaml`` (fewest calls, an unseen order id a hack), and the model as the judge
   (``recipes/refund_judge.yaml`` at the server, for each ``--arms`` form:prompts), each command in its own process
   group;
4. writes the section ``real-rollouts`` of ``--out`` (``results/real_judge.md``, beside the seeded rows' tables) and
   the raw results to ``--out`` with ``.rollouts.json``.

    python benchmarks/real_rollouts.py --model models/qwen2.5-coder-0.5b.gguf --server-python llama-venv/bin/python
    python benchmarks/real_rollouts.py --model M.gguf --base-url http://127.0.0.1:8181/v1 --scenarios 8 --n 4
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import (
    REPO,
    Server,
    add_server_options,
    open_server,
    run_benchmark,
    run_in_group,
    say_as,
    stop_server,
    whileai_command,
)
from real_judge import (
    DEFAULT_OUT,
    last_line,
    passing_groups,
    run_command,
    run_one,
    table_row,
    write_section,
    write_whole,
)

from whileai.simulations.rollouts import MAX_AGENT_STEPS

say = say_as("real_rollouts")
RULES = {
    "rule: fewest tool calls (built-in)": None,
    "rule: recipes/refund_scripted.yaml": REPO / "recipes" / "refund_scripted.yaml",
}
JUDGE_RECIPE = REPO / "recipes" / "refund_judge.yaml"


def simulate_rows(
    server: Server, out: Path, family: str, scenarios: int, n: int, seed: int, timeout_s: float
) -> dict[str, Any]:
    """The model's rollouts into ``out`` and what they show."""
    done = run_in_group(
        whileai_command(
            "simulate", "--agent", "model", "--base-url", server.url, "--model", server.model_id,
            "--tool-calls", "json", "--scenarios", family, "--n", str(n), "--num-scenarios", str(scenarios),
            "--seed", str(seed), "--workers", "1", "-o", str(out),
        ),
        timeout_s,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"whileai simulate failed ({done.returncode}): {last_line(done.stderr)}")
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    passes = [r for r in rows if r["passed"]]
    summary = {
        # the command as anyone would type it: no port of this run's server, no path of this machine
        "command": f"whileai simulate --agent model --model {server.model_id} --tool-calls json --scenarios {family} "
        f"--n {n} --num-scenarios {scenarios} --seed {seed}",
        "seconds": round(done.seconds, 1),
        "rollouts": len(rows),
        "pass_at_1": done.stdout.strip(),
        "with_a_tool_call": sum(r["tool_calls"] > 0 for r in rows),
        "at_the_step_limit": sum(r["turns"] >= MAX_AGENT_STEPS for r in rows),
        "tool_calls_per_pass": round(sum(r["tool_calls"] for r in passes) / len(passes), 2) if passes else None,
        "pass_flaws": dict(Counter(flaw for r in passes for flaw in r["flaws"]).most_common()),
        "all_flaws": dict(Counter(flaw for r in rows for flaw in r["flaws"]).most_common()),
        "hacks": sum(bool(r.get("hack")) for r in rows),
        "fail_reasons": dict(
            Counter((r["reason"] or "").split(";")[0][:60] for r in rows if not r["passed"]).most_common(5)
        ),
    }
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def keep_graded_groups(raw: Path, out: Path) -> list[str]:
    """The rows of the groups with two passes or more, written to ``out``; their ids."""
    kept = {group for group, count in passing_groups(raw).items() if count >= 2}
    lines = [line for line in raw.read_text().splitlines() if line.strip() and json.loads(line)["scenario_id"] in kept]
    out.write_text("\n".join(lines) + "\n")
    return sorted(kept)


def run_rule(rows: Path, recipe: Path | None, timeout_s: float) -> dict[str, Any]:
    """``whileai spread`` and ``whileai judge-eval`` with a rule, as ``run_one`` does with the judge."""
    common = [str(rows), *(["--recipe", str(recipe)] if recipe else []), "--json"]
    return {
        "form": "-",
        "prompts": "-",
        "permutations": 1,
        "spread": run_command("spread", whileai_command("spread", *common), timeout_s),
        "judge_eval": run_command("judge-eval", whileai_command("judge-eval", *common), timeout_s),
    }


def render(model: str, summary: dict[str, Any], groups: list[str], rows: list[dict[str, str]]) -> str:
    """The Markdown section: the rollouts, then one table row per grader."""
    columns = [
        "model", "form", "prompts", "verdict", "std", "tau reorder (n)", "copies tied", "reference tau [95% CI]",
        "hack recall (flagged/ref)", "unusable", "calls", "p50 s", "wall min", "error",
    ]  # fmt: skip
    flaws = ", ".join(f"{name} {count}" for name, count in summary["pass_flaws"].items()) or "none"
    everyone = ", ".join(f"{name} {count}" for name, count in summary.get("all_flaws", {}).items()) or "none"
    lines = [
        f"## Graders on {model}'s own rollouts",
        "",
        "Written by `benchmarks/real_rollouts.py` (its docstring says how); the raw results are in",
        "`real_judge.rollouts.json`. The rows are the model's own support conversations, served by llama.cpp",
        f"(`{summary['command']}`, {summary['seconds'] / 60:.0f} min): {summary['rollouts']} rollouts, "
        f"{summary['pass_at_1']}; {summary['with_a_tool_call']} made a tool call and "
        f"{summary.get('at_the_step_limit', '-')} ran to the step limit; flaws read off the transcripts, of every "
        f"rollout: {everyone}; of the passes: {flaws}; {summary['hacks']} hacks.",
        "",
    ]
    if not rows:
        lines.append(
            f"The graders had {len(groups)} group(s) with two passes or more to read: too few to measure a grader "
            "against the reference, so none was run."
        )
        return "\n".join(lines) + "\n"
    lines += [
        f"The graders read the {len(groups)} groups with two passes or more.",
        "",
        "| grader | " + " | ".join(columns[1:]) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines) + "\n"


def benchmark(args: argparse.Namespace, work: Path) -> int:
    model_path = Path(args.model)
    server: Server | None = None
    try:
        server = open_server(args, work, say)
        raw, rows = work / "rollouts.all.jsonl", work / "rollouts.jsonl"
        kept = raw.with_suffix(".summary.json")
        if args.reuse and raw.is_file() and kept.is_file():
            summary = json.loads(kept.read_text())
            say(f"rollouts of an earlier run in {work}, reused")
        else:
            summary = simulate_rows(server, raw, args.family, args.scenarios, args.n, args.seed, args.run_timeout)
        say(f"rollouts: {json.dumps(summary)}")
        groups = keep_graded_groups(raw, rows)
        results: list[tuple[str, dict[str, Any]]] = []
        if len(groups) < 2:  # a result too: the model's own rollouts leave the graders nothing to tell apart
            write_section(args.out, "real-rollouts", render(model_path.name, summary, groups, []))
            write_whole(args.out.with_suffix(".rollouts.json"), json.dumps({"summary": summary, "groups": groups}))
            say(f"only {len(groups)} group(s) with two passes: no grader run; wrote the section to {args.out}")
            return 0
        for name, recipe in RULES.items():
            say(f"run: {name}")
            results.append((name, run_rule(rows, recipe, args.run_timeout)))
        for arm in args.arms.split(","):
            form, prompts = arm.split(":")
            say(f"run: judge {form}:{prompts}")
            run = run_one(rows, JUDGE_RECIPE, server, form, prompts, 1, work / f"cache-{form}-{prompts}", (),
                          args.run_timeout)  # fmt: skip
            results.append((f"judge: {model_path.name}", run))
        table = [table_row(name, None, run) for name, run in results]
        write_section(args.out, "real-rollouts", render(model_path.name, summary, groups, table))
        write_whole(
            args.out.with_suffix(".rollouts.json"),
            json.dumps({"summary": summary, "groups": groups, "runs": [r for _, r in results]}, indent=1) + "\n",
        )
        say(f"wrote the section real-rollouts of {args.out}")
        return 1 if any(row["error"] for row in table) else 0
    finally:
        if server is not None:
            stop_server(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_options(parser, "the GGUF file the server serves (agent and judge)")
    parser.add_argument("--family", default="builtin:all", help="the scenarios' family [builtin:all]")
    parser.add_argument("--scenarios", type=int, default=24, help="scenarios the model plays [24]")
    parser.add_argument("--n", type=int, default=4, help="rollouts per scenario [4]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="scores:v3,scores:v2", help="the judge's form:prompts, comma-separated")
    parser.add_argument("--run-timeout", type=float, default=14400.0, help="seconds one whileai command may take")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--work-dir", type=Path, default=None, help="rows, caches, server log [a temporary folder]")
    parser.add_argument("--reuse", action="store_true", help="the rollouts an earlier run left in --work-dir")
    return run_benchmark(parser.parse_args(argv), benchmark, "real_rollouts")


if __name__ == "__main__":
    sys.exit(main())
