"""Benchmark: a real GGUF model as the judge, served by llama.cpp on this machine, graded by ``whileai spread`` and
``whileai judge-eval`` on a fixed sample of simulated rows, one table row per answer form x prompt version.

What it does, in order:

1. starts llama.cpp's OpenAI-compatible server on 127.0.0.1 on a free port (``python -m llama_cpp.server`` from
   ``--server-python`` by default, or ``--server-cmd``) in its own process group, waits until ``/v1/models``
   answers, and notes what ``/props`` and ``/slots`` answer (the C++ ``llama-server`` gives ``total_slots``;
   llama-cpp-python's server has neither route). ``--base-url`` skips this and uses a server already up;
2. simulates the rows: ``whileai simulate --scenarios builtin:all --n 4 --seed 0`` on enough scenarios that
   ``--groups`` groups have two passes or more, and keeps those groups' rows (in the simulator's order), so every
   run grades the same sample;
3. for each answer form x prompt version: ``whileai spread ROWS --recipe RECIPE <overrides> --json`` and
   ``whileai judge-eval ROWS --recipe RECIPE <overrides> --json``, each in its own process group, with a fresh
   answer cache that the run's two commands share (judge-eval reuses the answers spread got; its calls are the
   rest). A command that fails (exit 2 on a setting the judge refuses, such as the score form with v1 prompts; exit
   4 when the judge answered nothing) makes an error row, and the next run goes on;
4. writes the table to ``--out`` (Markdown) and every run's raw JSON beside it (``.json``), after each run. Rows of
   earlier runs are kept, keyed by model, form, prompts and permutations: runs of several models build one table.

Tokens/s is the completion tokens the judge counted (the server's usage; llama-cpp-python's streamed answers carry
none, so there the streamed pieces) over both commands' wall seconds (prompt processing, queueing, the client and
start-up included), not over the sum of call latencies. Wall minutes are the two commands'.

The server's process group and every command's group are ended on every way out: a normal end, an error, Ctrl-C,
SIGTERM or SIGHUP (exit 130 or 128 + the signal).

    python benchmarks/real_judge.py --model models/qwen2.5-coder-0.5b.gguf \\
        --server-python llama-venv/bin/python --forms scores,ranking --prompts v1,v2
    python benchmarks/real_judge.py --model gemma-3-270m.gguf --base-url http://127.0.0.1:8080/v1
    python benchmarks/real_judge.py --model M.gguf --server-cmd 'llama-server -m {model} --host {host} --port {port}'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
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

DEFAULT_RECIPE = REPO / "recipes" / "refund_judge.yaml"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "real_judge.md"
RESULTS_FORMAT = "whileai-real-judge/1"
# The table's columns, in order; a record's "row" holds one cell per column.
COLUMNS = (
    "model",
    "size MB",
    "form",
    "prompts",
    "perms",
    "verdict",
    "std",
    "tau reorder (n)",
    "copies tied",
    "surface paid (pad/fmt/claim)",
    "reference tau [95% CI]",
    "hack recall (flagged/ref)",
    "unusable",
    "calls",
    "p50 s",
    "p95 s",
    "tok/s (wall)",
    "wall min",
    "error",
)
KEY_COLUMNS = ("model", "form", "prompts", "perms")


# ---------------------------------------------------------------------------------------------------- the rows


def passing_groups(rows_path: Path) -> dict[str, int]:
    """Passes per group of a rows file, groups in file order (``passed``, else a reward above 0, as whileai reads)."""
    counts: dict[str, int] = {}
    for line in rows_path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        passed = row["passed"] if row.get("passed") is not None else float(row.get("reward") or 0.0) > 0
        group = str(row["scenario_id"])
        counts[group] = counts.get(group, 0) + int(bool(passed))
    return counts


def make_rows(out: Path, groups: int, n: int = 4, seed: int = 0, timeout_s: float = 600.0) -> dict[str, Any]:
    """Simulate rows into ``out``: the first ``groups`` groups with two passes or more of ``whileai simulate
    --scenarios builtin:all``, doubling the scenarios until there are enough. Returns what was made."""
    scenarios = max(4, 2 * groups)
    while True:
        raw = out.with_suffix(".all.jsonl")
        done = run_in_group(
            whileai_command(
                "simulate", "--scenarios", "builtin:all", "--n", str(n), "--num-scenarios", str(scenarios),
                "--seed", str(seed), "-o", str(raw),
            ),
            timeout_s,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"whileai simulate failed ({done.returncode}): {last_line(done.stderr)}")
        counts = passing_groups(raw)
        kept = [g for g, passes in counts.items() if passes >= 2][:groups]
        if len(kept) == groups or scenarios >= 4096:
            break
        scenarios *= 2
    if len(kept) < groups:
        raise RuntimeError(f"only {len(kept)} groups with two passes in {scenarios} scenarios")
    wanted = set(kept)
    lines = [
        line for line in raw.read_text().splitlines() if line.strip() and json.loads(line)["scenario_id"] in wanted
    ]
    out.write_text("\n".join(lines) + "\n")
    raw.unlink()
    return {
        "command": f"whileai simulate --scenarios builtin:all --n {n} --num-scenarios {scenarios} --seed {seed}",
        "num_scenarios": scenarios,
        "groups": kept,
        "rows": len(lines),
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }


# ---------------------------------------------------------------------------------------------------- one run


def last_line(text: str, limit: int = 240) -> str:
    """The last non-empty line of ``text``, cut to ``limit`` characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:limit]


def parse_json_output(stdout: str) -> dict[str, Any] | None:
    """The JSON object a ``--json`` command printed: the whole output, else its last line that parses."""
    try:
        value = json.loads(stdout)
        return value if isinstance(value, dict) else None
    except ValueError:
        pass
    for line in reversed(stdout.splitlines()):
        if line.strip().startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def run_command(name: str, args: list[str], timeout_s: float) -> dict[str, Any]:
    """One whileai command: its exit code, wall seconds, parsed JSON and, where it failed, the error."""
    done = run_in_group(args, timeout_s)
    report = parse_json_output(done.stdout)
    result: dict[str, Any] = {"command": name, "returncode": done.returncode, "seconds": done.seconds, "json": report}
    if done.returncode is None:
        result["error"] = f"{name}: timed out after {timeout_s:.0f} s"
    elif done.returncode not in (0, 1):  # 1 is spread's "no spread": a result, not a failure
        why = (report or {}).get("error") or last_line(done.stderr) or last_line(done.stdout) or "no output"
        result["error"] = f"{name} exit {done.returncode}: {why}"
    elif report is None:
        result["error"] = f"{name}: no JSON on stdout ({last_line(done.stderr) or 'no output'})"
    return result


def judge_overrides(
    url: str, model_id: str, form: str, prompts: str, permutations: int, cache_dir: Path, extra: Sequence[str] = ()
) -> list[str]:
    """The recipe overrides of one run (``extra`` last, so it wins)."""
    return [
        f"grader.judge.base_url={url}",
        f"grader.judge.model={model_id}",
        f"grader.judge.answer_form={form}",
        f"grader.judge.prompts={prompts}",
        f"grader.judge.permutations={permutations}",
        f"grader.judge.cache_dir={cache_dir}",
        *extra,
    ]


def run_one(
    rows: Path,
    recipe: Path,
    server: Server,
    form: str,
    prompts: str,
    permutations: int,
    cache_dir: Path,
    extra: Sequence[str] = (),
    timeout_s: float = 7200.0,
) -> dict[str, Any]:
    """``whileai spread`` then ``whileai judge-eval`` on ``rows`` with one form, prompt version and permutation count;
    both run whatever the other did. Returns the raw results of both."""
    overrides = judge_overrides(server.url, server.model_id, form, prompts, permutations, cache_dir, extra)
    common = [str(rows), "--recipe", str(recipe), *overrides, "--json"]
    spread = run_command("spread", whileai_command("spread", *common), timeout_s)
    evaluation = run_command("judge-eval", whileai_command("judge-eval", *common), timeout_s)
    return {
        "form": form,
        "prompts": prompts,
        "permutations": permutations,
        "overrides": overrides,
        "spread": spread,
        "judge_eval": evaluation,
    }


# ---------------------------------------------------------------------------------------------------- the table


def judge_stats(grader: Any) -> dict[str, Any]:
    """A judge's counters in a report's ``grader`` section: nested under ``judge``, or the section itself."""
    if not isinstance(grader, dict):
        return {}
    nested = grader.get("judge")
    if isinstance(nested, dict):
        return nested
    return grader if "calls" in grader else {}


def _number(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}" if value == value else "nan"
    return str(value)


def _count(value: Any) -> Any:
    return len(value) if isinstance(value, (list, dict)) else value


def table_row(model: str, size_mb: float | None, run: dict[str, Any]) -> dict[str, str]:
    """One table row (a cell per column of ``COLUMNS``) from one run's raw results."""
    spread = run["spread"].get("json") or {}
    evaluation = run["judge_eval"].get("json") or {}
    spread_judge = judge_stats(spread.get("grader"))
    eval_cost = evaluation.get("cost") or {}
    controls = spread.get("controls") or {}

    copies = evaluation.get("copies")
    if isinstance(copies, dict) and copies.get("total") is not None:
        tied = f"{copies.get('tied')}/{copies.get('total')}"
    elif controls.get("identical_copies") is not None:
        total = int(controls["identical_copies"])
        tied = f"{total - int(controls.get('identical_copies_ordered') or 0)}/{total}"
    else:
        tied = "-"

    reference = evaluation.get("reference_tau") or {}
    if reference.get("mean") is not None:
        ref = (
            f"{_number(reference['mean'], 2)} [{_number(reference.get('low'), 2)}, {_number(reference.get('high'), 2)}]"
        )
    else:
        ref = "-"

    hacks = evaluation.get("hacks") or {}
    if hacks.get("recall") is not None or hacks.get("reference") is not None:
        flagged, reference = _number(_count(hacks.get("flagged"))), _number(_count(hacks.get("reference")))
        recall = f"{_number(hacks.get('recall'), 2)} ({flagged}/{reference})"
    else:
        recall = "-"

    unusable = evaluation.get("unusable_answers")
    if unusable is None and spread:
        unusable = (spread.get("failed_groups") or {}).get("unusable answer", 0)

    calls = [c for c in (spread_judge.get("calls"), eval_cost.get("calls")) if isinstance(c, int)]
    tokens_out = [t for t in (spread_judge.get("tokens_out"), eval_cost.get("tokens_out")) if isinstance(t, int)]
    latency = eval_cost if eval_cost.get("latency_p50_s") is not None else spread_judge
    wall = sum(float(r.get("seconds") or 0.0) for r in (run["spread"], run["judge_eval"]))
    errors = [r["error"] for r in (run["spread"], run["judge_eval"]) if r.get("error")]
    tau = controls.get("agreement_tau")
    surfaces = evaluation.get("surfaces") or {}
    paid = " ".join(
        f"{surfaces[k]['paid']}/{surfaces[k]['controls']}" if k in surfaces else "-"
        for k in ("padding", "formatting", "claim")
    )

    return {
        "model": model,
        "size MB": "-" if size_mb is None else f"{size_mb:.0f}",
        "form": run["form"],
        "prompts": run["prompts"],
        "perms": str(run["permutations"]),
        "verdict": str(spread.get("verdict") or "error"),
        "std": _number(spread.get("std")),
        "tau reorder (n)": "-" if tau is None else f"{_number(tau, 2)} ({controls.get('agreement_groups')})",
        "copies tied": tied,
        "surface paid (pad/fmt/claim)": paid if surfaces else "-",
        "reference tau [95% CI]": ref,
        "hack recall (flagged/ref)": recall,
        "unusable": _number(unusable),
        "calls": str(sum(calls)) if calls else "-",
        "p50 s": _number(latency.get("latency_p50_s"), 2),
        "p95 s": _number(latency.get("latency_p95_s"), 2),
        "tok/s (wall)": f"{sum(tokens_out) / wall:.1f}" if tokens_out and wall > 0 else "-",
        "wall min": f"{wall / 60:.2f}",
        "error": "; ".join(errors) or "",
    }


def record_key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(str(row.get(column, "")) for column in KEY_COLUMNS)


def merge_records(existing: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``existing`` with each ``new`` record in place of the one with its key (model, form, prompts, permutations),
    or appended: other models' rows stay, in their order."""
    merged = list(existing)
    positions = {record_key(r["row"]): i for i, r in enumerate(merged)}
    for record in new:
        key = record_key(record["row"])
        if key in positions:
            merged[positions[key]] = record
        else:
            positions[key] = len(merged)
            merged.append(record)
    return merged


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_table(records: list[dict[str, Any]]) -> str:
    """The Markdown page: what the columns mean, then one table row per record."""
    lines = [
        "# Real judges on llama.cpp",
        "",
        "Written by `benchmarks/real_judge.py` (its docstring and benchmarks/README.md say how it runs); the raw JSON",
        "of every run is in the `.json` beside this file. verdict and std: `whileai spread`; tau reorder: the spread",
        "controls' agreement under reordering (groups); copies tied: identical passes given equal places (tied/total);",
        "surface paid: `whileai judge-eval`'s copies changed on their surface alone (padding, formatting, a claim of",
        "correctness) that scored above their originals, of those measured;",
        "reference tau, hack recall, unusable: `whileai judge-eval`; calls: both commands' HTTP calls (one answer",
        "cache shared); p50/p95: call latency; tok/s: completion tokens (the server's usage, or the streamed pieces",
        "where a stream reports none) over both commands' wall seconds.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for record in records:
        lines.append("| " + " | ".join(_cell(record["row"].get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def load_records(json_path: Path) -> list[dict[str, Any]]:
    """The records of an earlier results file (none if there is no file)."""
    if not json_path.exists():
        return []
    data = json.loads(json_path.read_text())
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise SystemExit(f"{json_path} is not a {RESULTS_FORMAT} results file; move it or pick another --out")
    return list(data.get("records") or [])


def write_results(out: Path, records: list[dict[str, Any]]) -> None:
    """The table to ``out`` and the records to ``out`` with ``.json``, each written whole then moved into place."""
    write_whole(out.with_suffix(".json"), json.dumps({"format": RESULTS_FORMAT, "records": records}, indent=1) + "\n")
    write_section(out, "real-judge", render_table(records))


def write_section(path: Path, name: str, text: str) -> None:
    """``text`` as the section ``name`` of the Markdown page at ``path``, between ``<!-- name -->`` markers: the
    section replaced where the page has it, added at the end where it does not; the page's other sections kept, so
    two benchmarks can write one page."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{begin}\n{text.strip()}\n{end}\n"
    page = path.read_text() if path.exists() else ""
    if begin in page and end in page[page.index(begin) :]:
        head, rest = page.split(begin, 1)
        page = head + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        page = (page.rstrip() + "\n\n" if page.strip() else "") + block
    write_whole(path, page)


def write_whole(path: Path, text: str) -> None:
    """``text`` to ``path``, written beside it then moved into place, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


# ---------------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_server_options(parser, "the GGUF file (its name and size go in the table)")
    parser.add_argument("--forms", default="scores,ranking", help="answer forms, comma-separated [scores,ranking]")
    parser.add_argument("--prompts", default="v1,v2", help="prompt versions, comma-separated [v1,v2]")
    parser.add_argument("--permutations", type=int, default=1, help="display orders per group [1]")
    parser.add_argument("--groups", type=int, default=6, help="groups with two passes or more in the sample [6]")
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE, help="the judge recipe [recipes/refund_judge]")
    parser.add_argument(
        "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="one more recipe override for every run, e.g. grader.judge.timeout_s=600 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--run-timeout", type=float, default=7200.0, help="seconds one whileai command may take")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the Markdown table; the JSON goes beside it")
    parser.add_argument("--work-dir", type=Path, default=None, help="rows, caches, server log [a temporary folder]")
    return parser.parse_args(argv)


say = say_as("real_judge")


def benchmark(args: argparse.Namespace, work: Path) -> int:
    """Start or reach the server, make the rows, do every run; write the results after each. Returns the exit code:
    0 when every run finished without an error, 1 when some run has one."""
    model_path = Path(args.model)
    model = model_path.name
    size_mb = model_path.stat().st_size / 2**20 if model_path.is_file() else None
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    versions = [p.strip() for p in args.prompts.split(",") if p.strip()]
    records = load_records(args.out.with_suffix(".json"))

    rows = work / "rows.jsonl"
    sample = make_rows(rows, args.groups)
    say(f"rows: {sample['rows']} in {len(sample['groups'])} groups ({sample['command']}), {rows}")

    server: Server | None = None
    try:
        server = open_server(args, work, say)
        for path, answer in server.probes.items():
            say(f"GET {path}: {json.dumps(answer)[:200]}")

        failed = 0
        for form in forms:
            for version in versions:
                say(f"run: {model} form={form} prompts={version} permutations={args.permutations}")
                run = run_one(
                    rows, args.recipe, server, form, version, args.permutations,
                    work / f"cache-{form}-{version}-{args.permutations}", args.extra, args.run_timeout,
                )  # fmt: skip
                row = table_row(model, size_mb, run)
                failed += bool(row["error"])
                record = {
                    "row": row,
                    "run": run,
                    "sample": sample,
                    "server": {
                        "url": server.url,
                        "model_id": server.model_id,
                        "command": server.command,
                        "probes": server.probes,
                        "startup_s": server.startup_s,
                    },
                    "model_path": str(model_path),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                }
                records = merge_records(records, [record])
                write_results(args.out, records)
                say("  " + ", ".join(f"{c} {row[c]}" for c in COLUMNS[5:] if row[c]))
        say(f"wrote {args.out} and {args.out.with_suffix('.json')}")
        return 1 if failed else 0
    finally:
        if server is not None:
            stop_server(server)


def main(argv: Sequence[str] | None = None) -> int:
    return run_benchmark(parse_args(argv), benchmark, "real_judge")


if __name__ == "__main__":
    sys.exit(main())
