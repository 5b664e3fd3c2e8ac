"""What the spread watch costs a run: extra grader calls and training time, the watch at its default against off.

Trains ``recipes/tiny_cpu_gar.yaml`` (the README's main job, 60 steps) with ``spread.watch`` as shipped and with
``spread.watch.enabled=false``, alternating, ``--repeats`` times each, every run ``whileai train`` in its own process
group with one torch thread. Per setting: the median training seconds (``whileai_run.json``'s ``seconds``), and for
the watched runs the checks made, the control groups sent and the grader calls training made (``watch.jsonl``), so
the extra calls are a share of the run's grader calls: the figure a judge's bill follows. A last pair runs with a
check every step and 2 controls each, no budget, to show what an eager watch would cost.

    python benchmarks/bench_watch.py                # about 5 minutes on 2 cores
    python benchmarks/bench_watch.py --repeats 1 --steps 20    # quicker
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import run_in_group, whileai_command  # the runner that ends a command's process group on every exit

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
SETTINGS = {
    "watch off": ["spread.watch.enabled=false"],
    "watch as shipped": [],
    "every step, 2 controls, no budget": [
        "spread.watch.every_steps=1",
        "spread.watch.controls=2",
        "spread.watch.max_extra_calls=1.0",
    ],
}


def train(overrides: list[str], folder: Path, steps: int) -> dict[str, float]:
    """One run's training seconds and, when watched, its checks, controls and grader calls."""
    command = ("train", str(RECIPE), "model.threads=1", f"trainer.max_steps={steps}", f"output_dir={folder}")
    done = run_in_group(whileai_command(*command, *overrides), timeout_s=1800)
    if done.returncode != 0:
        raise SystemExit(f"whileai train {' '.join(overrides)} exited {done.returncode}: {done.stderr[-1500:]}")
    figures = {"seconds": json.loads((folder / "whileai_run.json").read_text())["seconds"]}
    watch = folder / "watch.jsonl"
    if watch.is_file():
        checks = [json.loads(line) for line in watch.read_text().splitlines()]
        figures.update(
            checks=len(checks),
            controls=sum(c["controls_sent"] for c in checks),
            grader_calls=checks[-1]["grader_calls"],
        )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60, help="steps a run (the main job's 60)")
    options = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="whileai-watch-") as scratch:
        for repeat in range(options.repeats):
            for index, (name, overrides) in enumerate(SETTINGS.items()):
                if index == 2 and repeat:  # the eager watch once: its cost is in calls, not in noise
                    continue
                runs[name].append(train(overrides, Path(scratch) / f"run-{repeat}-{index}", options.steps))
                print(f"{name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    base = statistics.median(r["seconds"] for r in runs["watch off"])
    print(f"{options.steps} steps of recipes/tiny_cpu_gar.yaml, one torch thread; median over runs")
    print(f"{'setting':36} {'train s':>8} {'vs off':>7} {'checks':>7} {'controls':>9} {'calls':>6} {'extra':>7}")
    for name, measured in runs.items():
        seconds = statistics.median(r["seconds"] for r in measured)
        last = measured[-1]
        extra = last.get("controls", 0) / last["grader_calls"] if last.get("grader_calls") else None
        print(
            f"{name:36} {seconds:8.1f} {seconds / base:6.2f}x {last.get('checks', 0):7.0f} "
            f"{last.get('controls', 0):9.0f} {last.get('grader_calls', 0):6.0f} "
            f"{'' if extra is None else f'{extra:.1%}':>7}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
