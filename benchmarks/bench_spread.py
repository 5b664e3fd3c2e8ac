"""Benchmark: ``whileai spread`` with a scripted grader over 200,000 rows in 25,000 groups.

Prints rows per second and peak memory next to the input file's size, measured side by side in one run:

- the library call (``whileai.grading.gate.check_spread_file``, with the recipe's controls as the command runs them) in
  a fresh subprocess, timed inside it, with the peak resident memory it added over the baseline after imports
  (``ru_maxrss`` before and after);
- the same through the ``whileai spread`` command, wall time of the whole process (start-up and imports included),
  and the command on the first 16 rows of the file: its start-up, imports and recipe alone;
- the floors: the same file read line by line and parsed with nothing else, by the parser whileai reads JSONL with
  (orjson when installed, ``pip install 'whileai-grpo[fast]'``) and by the standard library's ``json.loads``.

Each ratio divides by the floor timed inside its process (start-up excluded), as the targets are stated: of wall time,
and in brackets of CPU time (user + system), the steadier of the two on a shared machine. The command's output must be
the library's report, word for word; the figures (std, median, controls) are printed from the library.

Targets (issue 16): at least 100,000 rows/s for the whole process, and at most 2x bare parsing (printed against both
parsers: orjson, the one whileai uses when installed, and the standard library's); (issue 4) peak memory below the
size of the input file. Subprocesses cache their bytecode as a user's install does (``PYTHONDONTWRITEBYTECODE`` is
dropped from their environment, and one untimed run comes first).

    python benchmarks/bench_spread.py                   # 200,000 rows, 25,000 groups, median of 3
    python benchmarks/bench_spread.py --rows 50000 --repeats 1   # 6,250 groups of 8
    python benchmarks/bench_spread.py --parser json     # force the standard library (WHILEAI_JSON=json)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "refund_scripted.yaml"

LIBRARY_RUN = r"""
import json, resource, sys, time
from pathlib import Path
from whileai.config import load_recipe
from whileai.config.build import build_grading
from whileai.grading.gate import check_spread_file
try:
    from whileai.rows import json_parser
except ImportError:  # a whileai from before the choice of parser
    def json_parser():
        return "json"
loaded = load_recipe(sys.argv[2])
grading = build_grading(loaded)
settings = loaded.recipe.spread
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start, cpu = time.perf_counter(), time.process_time()
run = check_spread_file(sys.argv[1], grading, controls=settings.controls, seed=settings.seed)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = run.report
print(json.dumps({"seconds": seconds, "cpu": cpu, "rows": run.rows.rows, "added_kib": peak - base,
                  "parser": json_parser(), "text": str(report), "verdict": report.verdict, "std": report.std,
                  "median": report.median, "near_median": report.near_median, "scores": len(report.scores),
                  "groups": report.groups, "controls": None if report.controls is None else report.controls.as_dict()}))
"""

FLOOR_RUN = r"""
import json, sys, time
if sys.argv[2] == "orjson":
    from orjson import loads
else:
    loads = json.loads
start, cpu = time.perf_counter(), time.process_time()
n = 0
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        loads(line)
        n += 1
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu, "rows": n}))
"""


def make_rows(path: Path, rows: int, groups: int, seed: int = 0) -> None:
    """Support-agent-like rows: 8 per group, 0 to 4 tool calls, about 300 bytes of text each."""
    rng = random.Random(seed)
    per = rows // groups
    with path.open("w") as handle:
        for g in range(groups):
            for _ in range(per):
                calls = rng.randint(0, 4)
                text = "".join(
                    f'<tool_call>lookup_order {{"order_id": "ORD-{rng.randint(1000, 1099)}"}}</tool_call>'
                    f'<tool_result>{{"status": "delivered"}}</tool_result>'
                    for _ in range(calls)
                )
                text += " Done: I refunded the order. " + "x" * rng.randint(20, 120)
                row = {"scenario_id": f"refund-{g}", "reward": float(rng.random() < 0.7), "final_text": text}
                handle.write(json.dumps(row) + "\n")


def run_json(code: str, *args: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall and CPU seconds (user + system) of a command, and its result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done


def has_orjson() -> bool:
    done = subprocess.run([sys.executable, "-c", "import orjson"], capture_output=True)
    return done.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--groups", type=int, default=None, help="groups of the rows (default: rows / 8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--parser",
        choices=("auto", "json", "orjson"),
        default="auto",
        help="the JSONL parser whileai uses (WHILEAI_JSON); auto: orjson when installed",
    )
    args = parser.parse_args()
    groups = args.groups or max(1, args.rows // 8)
    env = dict(os.environ)
    env.pop("WHILEAI_JSON", None)
    # Bytecode is cached as on a user's machine (pip writes it at install; an editable install on first import):
    # a sandbox's PYTHONDONTWRITEBYTECODE=1 would have every process compile whileai's 40-odd modules again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.parser != "auto":
        env["WHILEAI_JSON"] = args.parser
    floors = ["json"]
    if args.parser != "json" and has_orjson():
        floors.insert(0, "orjson")
    script = shutil.which("whileai")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        make_rows(path, args.rows, groups)
        tiny = Path(folder) / "tiny.jsonl"
        with path.open() as source:
            tiny.write_text("".join(source.readline() for _ in range(16)))
        size_mib = path.stat().st_size / 2**20
        # Each measure: a list of (wall seconds, CPU seconds), one per repeat.
        times: dict[str, list[tuple[float, float]]] = {f"{name} floor": [] for name in floors}
        library: list[dict] = []
        if script:  # once, untimed: imports compiled and cached, the file in the page cache
            timed([script, "spread", str(tiny), "--recipe", str(RECIPE)], env)
        for _ in range(args.repeats):
            library.append(run_json(LIBRARY_RUN, str(path), str(RECIPE), env=env))
            times.setdefault("library", []).append((library[-1]["seconds"], library[-1]["cpu"]))
            for name in floors:
                done = run_json(FLOOR_RUN, str(path), name, env=env)
                times[f"{name} floor"].append((done["seconds"], done["cpu"]))
            if script:
                wall, cpu, done = timed([script, "spread", str(path), "--recipe", str(RECIPE)], env)
                assert done.returncode in (0, 1), done.stderr
                # The command prints the library's report, word for word.
                assert done.stdout.strip() == library[-1]["text"], (done.stdout, library[-1]["text"])
                times.setdefault("process", []).append((wall, cpu))
                wall, cpu, done = timed([script, "spread", str(tiny), "--recipe", str(RECIPE)], env)
                assert done.returncode in (0, 1), done.stderr
                times.setdefault("start-up", []).append((wall, cpu))
        first = library[0]
        rows, used = first["rows"], first["parser"]
        own = f"{used} floor" if f"{used} floor" in times else "json floor"  # the floor of the parser that ran
        wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
        added = statistics.median(r["added_kib"] for r in library) / 1024

        print(f"{rows:,} rows in {groups:,} groups, input {size_mib:.1f} MiB, median of {args.repeats}")
        print(f"whileai parsed JSONL with: {used}; ratios are of wall time (of CPU time in brackets)")
        columns = [own, "json floor"] if own != "json floor" else [own]
        print(f"{'measure':<34}{'seconds':>9}{'cpu s':>8}{'rows/s':>11}" + "".join(f"{'vs ' + c:>22}" for c in columns))
        labels = {
            **{f"{name} floor": f"{name}.loads every line (floor)" for name in floors},
            "library": "check_spread_file (library)",
            "process": "whileai spread (whole process)",
            "start-up": "  start-up (command on 16 rows)",
        }
        for key, label in labels.items():
            if key not in times:
                continue
            text = f"{label:<34}{wall[key]:>9.2f}{cpu[key]:>8.2f}"
            if key != "start-up":
                text += f"{rows / wall[key]:>11,.0f}"
                text += "".join(f"{f'{wall[key] / wall[c]:.2f}x ({cpu[key] / cpu[c]:.2f}x)':>22}" for c in columns)
            print(text)
        print(f"peak memory added by the check: {added:.1f} MiB = {added / size_mib:.2f} x the input file")
        print(
            f"verdict: {first['verdict']}; {first['scores']:,} scores in {first['groups']:,} groups, std "
            f"{first['std']!r}, median {first['median']!r}, near median {first['near_median']!r}"
        )
        print(f"controls: {json.dumps(first['controls'])}")
        if "process" not in times:
            print("whileai spread: not run (no whileai script on PATH)")

        def verdict(ok: bool) -> str:
            return "met" if ok else "missed"

        for key, what in (("library", "library"), ("process", "whole process")):
            if key in times:
                parsing = "; ".join(
                    f"<= 2x {c.split()[0]} parsing {verdict(wall[key] <= 2 * wall[c])}" for c in columns
                )
                print(f"targets, {what}: >= 100,000 rows/s {verdict(rows / wall[key] >= 100_000)}; {parsing}")
        print(f"peak memory < input size: {verdict(added < size_mib)}")


if __name__ == "__main__":
    main()
