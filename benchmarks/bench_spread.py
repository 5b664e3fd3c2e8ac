"""Benchmark: ``whileai spread`` with a scripted grader over 200,000 rows in 25,000 groups.

Prints rows per second and peak memory next to the input file's size, measured in one run:

- the library call (``whileai.preflight.check_spread_file``) in a fresh subprocess, timed inside it, with the peak
  resident memory it added over the baseline after imports (``ru_maxrss`` before and after);
- the same through the ``whileai spread`` command, wall time of the whole process (start-up included);
- the same file read with ``json.loads`` line by line and nothing else, the floor any JSONL reader pays.

Targets (issue 4): at least 50,000 rows/s, and peak memory below the size of the input file.

    python benchmarks/bench_spread.py                   # 200,000 rows, 25,000 groups, median of 3
    python benchmarks/bench_spread.py --rows 50000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import random
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
from whileai.graders import build_grading
from whileai.preflight import check_spread_file
grading = build_grading(load_recipe(sys.argv[2]))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
run = check_spread_file(sys.argv[1], grading)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "rows": run.rows.rows, "verdict": run.report.verdict,
                  "added_kib": peak - base}))
"""

FLOOR_RUN = r"""
import json, sys, time
start = time.perf_counter()
n = 0
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        json.loads(line)
        n += 1
print(json.dumps({"seconds": time.perf_counter() - start, "rows": n}))
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


def run_json(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--groups", type=int, default=25_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    script = shutil.which("whileai")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        make_rows(path, args.rows, args.groups)
        size_mib = path.stat().st_size / 2**20
        library, cli, floor = [], [], []
        for _ in range(args.repeats):
            library.append(run_json(LIBRARY_RUN, str(path), str(RECIPE)))
            floor.append(run_json(FLOOR_RUN, str(path)))
            if script:
                start = time.perf_counter()
                done = subprocess.run([script, "spread", str(path), "--recipe", str(RECIPE)], capture_output=True)
                cli.append(time.perf_counter() - start)
                assert done.returncode in (0, 1), done.stderr
        rows = library[0]["rows"]
        lib_s = statistics.median(r["seconds"] for r in library)
        floor_s = statistics.median(r["seconds"] for r in floor)
        added = statistics.median(r["added_kib"] for r in library) / 1024
        print(f"{rows:,} rows in {args.groups:,} groups, input {size_mib:.1f} MiB, median of {args.repeats}")
        print(f"{'measure':<38}{'seconds':>9}{'rows/s':>12}{'vs json floor':>15}")
        print(f"{'json.loads every line (floor)':<38}{floor_s:>9.2f}{rows / floor_s:>12,.0f}{1.0:>14.2f}x")
        print(f"{'check_spread_file (library)':<38}{lib_s:>9.2f}{rows / lib_s:>12,.0f}{lib_s / floor_s:>14.2f}x")
        if cli:
            cli_s = statistics.median(cli)
            print(f"{'whileai spread (whole process)':<38}{cli_s:>9.2f}{rows / cli_s:>12,.0f}{cli_s / floor_s:>14.2f}x")
        print(f"peak memory added by the check: {added:.1f} MiB = {added / size_mib:.2f} x the input file")
        print(f"verdict: {library[0]['verdict']}")
        print(
            f"target >= 50,000 rows/s: {'met' if rows / lib_s >= 50_000 else 'missed'}; "
            f"peak memory < input size: {'met' if added < size_mib else 'missed'}"
        )


if __name__ == "__main__":
    main()
