"""The README's main job on 2 CPU cores: torch threads 1 vs 2, with the machine quiet or with one other busy process.

Runs ``whileai train recipes/tiny_cpu_gar.yaml`` (the README's first line) as a subprocess for ``--steps`` steps in
each of four conditions, side by side in one run, and prints the training time (``whileai_run.json``'s ``seconds``)
and the whole command's wall time, with each training time's ratio to one thread on a quiet machine. The "busy"
condition keeps one other process spinning on a core, the way a shared CI box or a second job does. Finally the main
job as shipped (60 steps, default threads) is timed once on the quiet machine.

    python benchmarks/bench_threads.py            # about 3 minutes
    python benchmarks/bench_threads.py --steps 5  # quicker
    python benchmarks/bench_threads.py --quick    # a smoke: 1 step each, no run as shipped
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
# A busy process that spins while the benchmark lives: killed with it, or orphaned by a SIGKILL of the benchmark.
# (The parent's pid comes as an argument: read in the child, it could already be init's.)
SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    pass\n"


def train(steps: int | None, threads: int | None, folder: Path) -> tuple[float, float]:
    """(training seconds, whole command seconds) of one run."""
    args = [sys.executable, "-m", "whileai.cli.main", "train", str(RECIPE), f"output_dir={folder}"]
    if steps is not None:
        args.append(f"trainer.max_steps={steps}")
    if threads is not None:
        args.append(f"model.threads={threads}")
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, cwd=folder.parent)
    whole = time.perf_counter() - started
    return json.loads((folder / "whileai_run.json").read_text())["seconds"], whole


def measure(steps: int, quick: bool) -> tuple[list[tuple[int, bool, float, float]], tuple[float, float] | None]:
    """(threads, busy, training seconds, whole seconds) for each condition, and the run as shipped (None: quick)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for busy in (False, True):
            spinner = subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]) if busy else None
            try:
                for threads in (1, 2):
                    seconds, whole = train(steps, threads, Path(tmp) / f"run-{busy}-{threads}")
                    rows.append((threads, busy, seconds, whole))
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
        shipped = None if quick else train(None, None, Path(tmp) / "shipped")
    return rows, shipped


def table(rows: list[tuple[int, bool, float, float]], shipped: tuple[float, float] | None, steps: int) -> str:
    """The printed table: each condition's training and whole-command time, training as a ratio to one thread on a
    quiet machine (the first row)."""
    base = rows[0][2]
    lines = [
        f"whileai train {RECIPE.relative_to(REPO)}, {steps} steps, 2 CPU cores",
        "| torch threads | other busy process | training | whole command | training vs 1 thread, quiet |",
        "|---|---|---|---|---|",
    ]
    for threads, busy, seconds, whole in rows:
        lines.append(
            f"| {threads} | {'yes' if busy else 'no'} | {seconds:.1f} s | {whole:.1f} s | {seconds / base:.2f}x |"
        )
    if shipped is not None:
        seconds, whole = shipped
        lines.append(
            f"\nas shipped (60 steps, default threads: 1), quiet: {seconds:.1f} s training, {whole:.1f} s whole"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="1 step per condition and no run as shipped (a smoke).")
    options = parser.parse_args(argv)
    if options.quick:
        options.steps = 1
    rows, shipped = measure(options.steps, options.quick)
    print(table(rows, shipped, options.steps))


if __name__ == "__main__":
    main()
