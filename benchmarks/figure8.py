"""A small Figure 8 on CPU: binary GRPO against GAR over seeds, on the two tasks whileai ships for a tiny model.

Section 4.3 of the MiMo-V2.6 report (Figure 8): under a binary reward, turns and length grow and the pass rate
stalls; under a groupwise grader, pass-rate gains hold, turns stay flat and length grows slowly. This script asks
whether whileai reproduces that, with every knob fixed in advance (``DESIGN`` below; recorded in the results):

- **echo** (single turn, length): ``recipes/tiny_cpu_binary.yaml`` against ``recipes/tiny_cpu_gar.yaml``;
- **agent** (multi-turn tool calls, the support scenarios as TRL's environment): ``recipes/tiny_cpu_agent_binary.yaml``
  against ``recipes/tiny_cpu_agent_gar.yaml``.

Each pair differs only in the grader; each run is ``whileai train RECIPE trainer.seed=S trainer.max_steps=N
model.threads=1 ...`` in its own process (one torch thread, so a run reproduces bit for bit). The seed sets the tiny
model's weights, its warm start and the sampling; the tasks' data is the same for every seed. Seeds are the unit of
analysis: per run, the mean of each metric over the final window; per seed, GAR minus binary (the two arms start from
the same model); over seeds, the mean difference with a 95% t interval and the smallest difference the design could
detect (80% power, two-sided 5%). After the grid, one seed is run again and must give the recorded numbers exactly.

    python benchmarks/figure8.py                  # the whole experiment: about 35 minutes on 2 cores
    python benchmarks/figure8.py --quick          # a smoke: echo only, 2 seeds, 3 steps (about 2 minutes)
    python benchmarks/figure8.py --tasks agent    # one task

Finished runs under ``--runs`` are reused when their recipe matches (``--fresh`` runs them again; when every run is
reused, the timings of the invocation that trained them are kept). Writes
``figure8.json`` (per seed and per step), ``figure8.md`` (the table) and ``figure8_<task>.png`` (made with
``whileai report --plot``) under ``--results``. Exit status 1 when a run fails or the rerun differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from processes import end_group, raise_interrupted  # noqa: E402  (the process-group handling the benchmarks share)

# Chosen before any arm comparison and never changed per arm: the shipped recipes as they are, run longer. The echo
# task's 200 steps are "a few hundred steps" at about half a second a step; the agent task's 40 steps come from a
# pilot on seed 0 (not one of the seeds below) in which the binary arm's tool calls had stopped growing by step 30.
DESIGN: dict[str, Any] = {
    "seeds": [1, 2, 3, 4, 5],
    "threads": 1,
    "tasks": {
        "echo": {
            "arms": {"binary": "recipes/tiny_cpu_binary.yaml", "gar": "recipes/tiny_cpu_gar.yaml"},
            "steps": 200,
            "window": 50,
            "metrics": ["pass rate", "length"],
        },
        "agent": {
            "arms": {"binary": "recipes/tiny_cpu_agent_binary.yaml", "gar": "recipes/tiny_cpu_agent_gar.yaml"},
            "steps": 40,
            "window": 10,
            "metrics": ["pass rate", "length", "tool calls"],
        },
    },
    "reproduce": {"task": "echo", "arm": "gar", "seed": "first"},
}
QUICK = {"seeds": [1, 2], "steps": 3, "window": 2, "tasks": ["echo"]}


def run_args(recipe: str, seed: int, steps: int, folder: Path, threads: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``whileai train`` overrides of one run (the same for both arms; ``extra``, from ``--set``, last)."""
    return [
        str(REPO / recipe),
        f"trainer.seed={seed}",
        f"trainer.max_steps={steps}",
        f"trainer.save_steps={steps}",
        f"model.threads={threads}",
        f"output_dir={folder}",
        *extra,
    ]


def finished(folder: Path, args: list[str]) -> bool:
    """A run folder that holds a finished run of exactly these arguments."""
    try:
        summary = json.loads((folder / "whileai_run.json").read_text())
        recorded = json.loads((folder / "figure8_args.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return summary.get("status") == "finished" and recorded == args


# The runs under way, each the leader of its own process group: a stop of the benchmark ends them all.
_LIVE: set[subprocess.Popen[Any]] = set()


def train(args: list[str], folder: Path, log: Path) -> float:
    """Run ``whileai train`` in its own process group, ended however this returns; the wall seconds. Raises on a
    failed run, naming its log."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "whileai.cli.main", "train", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        _LIVE.add(process)
        try:
            code = process.wait()
        finally:
            _LIVE.discard(process)
            end_group(process)
    if code != 0:
        raise RuntimeError(f"whileai train {' '.join(args)} exited {code}; its output is in {log}")
    (folder / "figure8_args.json").write_text(json.dumps(args))
    return time.perf_counter() - started


def series(folder: Path) -> dict[str, list[float]]:
    """The per-step metrics of one run folder, exactly as TRL logged them."""
    from whileai.reports.experiments import FIGURE_METRICS
    from whileai.reports.runs import load_report

    run = load_report(folder)
    return {name: [row.get(key, float("nan")) for row in run.steps] for name, key in FIGURE_METRICS.items()}


def experiment_table(results: dict[str, Any]) -> str:
    """The Markdown tables of the results: per task, each metric's first and final window
    per arm (mean over seeds), the final-window difference with its 95% interval and detectable size, and the
    per-seed final values."""
    from whileai.reports.experiments import format_value
    from whileai.stats import mean

    lines: list[str] = []
    for task, experiment in results["tasks"].items():
        arms = experiment["arms"]
        names = sorted(arms, key=lambda name: (name != "binary", name))
        seeds = max(len(arms[name]["seeds"]) for name in names)
        steps = max(
            (band["steps"][-1] for name in names for band in arms[name]["per_step"].values() if band["steps"]),
            default=0,
        )
        lines += [
            f"### {task}: {steps} steps, {seeds} seeds per arm, final window {experiment['window']} steps",
            "",
            "| metric | "
            + " | ".join(f"{name} first → final" for name in names)
            + " | difference ("
            + " − ".join(reversed(names))
            + ") [95% CI] | detectable | n |",
            "|---|" + "---|" * len(names) + "---|---|---|",
        ]
        for metric in experiment["metrics"]:
            cells = []
            for name in names:
                first = mean(list(arms[name]["first"][metric].values()))
                final = mean(list(arms[name]["final"][metric].values()))
                cells.append(f"{format_value(metric, first)} → {format_value(metric, final)}")
            diff = experiment["differences"].get(metric)
            if diff is None:
                lines.append(f"| {metric} | " + " | ".join(cells) + " | | | |")
                continue
            low, high = format_value(metric, diff["low"], True), format_value(metric, diff["high"], True)
            interval = f"{format_value(metric, diff['difference'], True)} [{low}, {high}]"
            how = "paired" if diff["paired"] else "Welch"
            lines.append(
                f"| {metric} | "
                + " | ".join(cells)
                + f" | {interval} | {format_value(metric, diff['detectable'], True).lstrip('+')} | "
                f"{diff['n_a']} seeds ({how}) |"
            )
        lines += ["", "Final-window mean per seed:", ""]
        header = ["arm", "seed", *experiment["metrics"]]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for name in names:
            for seed in arms[name]["seeds"]:
                values = [format_value(metric, arms[name]["final"][metric][seed]) for metric in experiment["metrics"]]
                lines.append(f"| {name} | {seed} | " + " | ".join(values) + " |")
        lines.append("")
    reproduced = results.get("reproduced")
    if reproduced:
        verdict = "identical" if reproduced["identical"] else "DIFFERENT"
        lines.append(
            f"Rerun of {reproduced['task']} {reproduced['arm']} seed {reproduced['seed']} "
            f"({reproduced['steps']} steps): "
            f"every logged per-step number {verdict} to the recorded run."
        )
        lines.append("")
    return "\n".join(lines)


def main(
    design: dict[str, Any] = DESIGN,
    quick: dict[str, Any] = QUICK,
    prefix: str = "figure8",
    description: str = __doc__.splitlines()[0],
    then: Callable[[Path], None] | None = None,
) -> int:
    """Run ``design`` (arms over seeds, per task; ``quick`` is its smoke) and write ``<prefix>.json``, ``.md`` and a
    figure per task under ``--results``; ``then(results folder)`` after a full run that wrote them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tasks", nargs="+", choices=sorted(design["tasks"]), default=list(design["tasks"]))
    parser.add_argument("--seeds", nargs="+", type=int, default=design["seeds"])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (each on one thread)")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / prefix, help="where the run folders go")
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke: {', '.join(quick['tasks'])}, {len(quick['seeds'])} seed(s), {quick['steps']} steps",
    )
    parser.add_argument("--fresh", action="store_true", help="run every run again, even a finished one")
    parser.add_argument("--no-reproduce", action="store_true", help="skip the rerun of one seed")
    parser.add_argument(
        "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="one more recipe override for every run of both arms, e.g. model.name_or_path=DIR (repeatable)",
    )  # fmt: skip
    options = parser.parse_args()
    tasks = {name: dict(design["tasks"][name]) for name in options.tasks}
    seeds = options.seeds
    if options.quick:
        seeds = quick["seeds"]
        tasks = {
            name: {**design["tasks"][name], "steps": quick["steps"], "window": quick["window"]}
            for name in quick["tasks"]
        }
    options.runs.mkdir(parents=True, exist_ok=True)

    grid = [(task, arm, seed) for task in tasks for seed in seeds for arm in tasks[task]["arms"]]
    folders = {key: options.runs / key[0] / key[1] / f"seed-{key[2]}" for key in grid}
    extra = tuple(options.extra)
    arguments = {
        key: run_args(
            tasks[key[0]]["arms"][key[1]], key[2], tasks[key[0]]["steps"], folders[key], design["threads"], extra
        )
        for key in grid
    }
    seconds: dict[tuple[str, str, int], float] = {}
    reused: set[tuple[str, str, int]] = set()
    failures: list[str] = []
    started = time.perf_counter()

    def one(key: tuple[str, str, int]) -> None:
        folder = folders[key]
        if not options.fresh and finished(folder, arguments[key]):
            seconds[key] = json.loads((folder / "whileai_run.json").read_text()).get("seconds", float("nan"))
            reused.add(key)
            print(f"{prefix}: {key[0]} {key[1]} seed {key[2]}: reused {folder}", flush=True)
            return
        try:
            seconds[key] = train(arguments[key], folder, folder.parent / f"seed-{key[2]}.log")
        except RuntimeError as err:
            failures.append(str(err))
            print(f"{prefix}: {err}", flush=True)
            return
        print(f"{prefix}: {key[0]} {key[1]} seed {key[2]}: {seconds[key]:.0f} s", flush=True)

    for signum in (signal.SIGTERM, signal.SIGHUP):  # unwind as Ctrl-C does
        signal.signal(signum, raise_interrupted)
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        try:
            list(pool.map(one, grid))
        except BaseException:  # Ctrl-C or a signal: no new run starts, and the runs under way end with their groups
            pool.shutdown(wait=False, cancel_futures=True)
            for process in list(_LIVE):
                end_group(process)
            raise
    if failures:
        print(f"{prefix}: {len(failures)} run(s) failed; no table written", file=sys.stderr)
        return 1
    grid_seconds = time.perf_counter() - started

    reproduced: dict[str, Any] | None = None
    if not options.no_reproduce and design["reproduce"] is not None:
        task = design["reproduce"]["task"] if design["reproduce"]["task"] in tasks else next(iter(tasks))
        key = (task, design["reproduce"]["arm"], seeds[0])
        again = options.runs / "reproduce" / f"{key[0]}-{key[1]}-seed-{key[2]}"
        args = run_args(
            tasks[task]["arms"][key[1]], key[2], tasks[task]["steps"], again, design["threads"], tuple(options.extra)
        )
        train(args, again, again.parent / f"{again.name}.log")
        recorded, rerun = series(folders[key]), series(again)
        same = json.dumps(recorded, sort_keys=True) == json.dumps(rerun, sort_keys=True)
        reproduced = {"task": key[0], "arm": key[1], "seed": key[2], "steps": tasks[task]["steps"], "identical": same}
        print(f"{prefix}: rerun of {key[0]} {key[1]} seed {key[2]}: {'identical' if same else 'DIFFERENT'}", flush=True)

    from whileai.reports.experiments import seed_experiment

    name = f"{prefix}_quick" if options.quick else prefix
    timing = {
        "grid_seconds": round(grid_seconds, 1),
        "run_seconds": {f"{k[0]}/{k[1]}/seed-{k[2]}": round(v, 1) for k, v in sorted(seconds.items())},
        "timed_here": len(grid) - len(reused),
    }
    design = {**design, "seeds": seeds, "tasks": tasks}
    if reused == set(grid):  # every run reused: keep the timings of the invocation that trained them
        try:
            previous = json.loads((options.results / f"{name}.json").read_text())
        except (OSError, json.JSONDecodeError):
            previous = {}
        if previous.get("design") == json.loads(json.dumps(design)) and previous.get("timed_here"):
            timing = {key: previous[key] for key in timing}
    results: dict[str, Any] = {
        "design": design,
        "quick": options.quick,
        "machine": _machine(design["threads"]),
        **timing,
        "reproduced": reproduced,
        "tasks": {},
    }
    options.results.mkdir(parents=True, exist_ok=True)
    for task, spec in tasks.items():
        runs = [folders[(task, arm, seed)] for seed in seeds for arm in spec["arms"]]
        experiment = seed_experiment(runs, window=spec["window"], metrics=spec["metrics"])
        for arm in experiment["arms"].values():
            arm["runs"] = {seed: _in_repo(folder) for seed, folder in arm["runs"].items()}
        results["tasks"][task] = experiment
        figure = options.results / f"{name}_{task}.png"
        subprocess.run(
            [sys.executable, "-m", "whileai.cli.main", "report", *map(str, runs), "--plot", str(figure), "--json"],
            check=True,
            capture_output=True,
        )
    (options.results / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    table = experiment_table(results)
    (options.results / f"{name}.md").write_text(table)
    print(table)
    if then is not None and not options.quick:
        then(options.results)
    if reproduced is not None and not reproduced["identical"]:
        print(f"{prefix}: the rerun did not reproduce the recorded numbers", file=sys.stderr)
        return 1
    return 0


def _in_repo(path: str | Path) -> str:
    """A path as the committed results name it: relative to the repository root when it lies inside it (the results
    must not carry the absolute paths of the machine that ran them), absolute otherwise."""
    resolved = Path(path).resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else str(path)


def _machine(threads: int) -> dict[str, Any]:
    import platform

    import torch
    import trl

    import whileai

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    return {
        "whileai": _in_repo(Path(whileai.__file__).parent),
        "commit": commit.strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "trl": trl.__version__,
        "cpus": os.cpu_count(),
        "threads_per_run": threads,
    }


if __name__ == "__main__":
    sys.exit(main())
