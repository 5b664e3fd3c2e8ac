"""``whileai report`` through the command line: the compact default summary at 80 columns, ``--steps``, two arms,
``--json``, what it says about a file it cannot read, and the README's example; plus the cluster-aware interval
every pass rate it prints uses."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import child_processes
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.stats import clustered_interval, t_quantile, wilson_interval

pq = pytest.importorskip("pyarrow.parquet")

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

# Two real 6-step runs of the offline recipes (`whileai train recipes/tiny_cpu_binary.yaml trainer.max_steps=6
# data.num_prompts=8`, and the same with tiny_cpu_gar.yaml), as they logged them: per step, each group's prompt
# digit and its 8 completions' verdicts (1 passed), TRL's mean completion length per step, and the factors the gar
# arm's grader gave each group's passes (grading.jsonl).
BINARY = [
    "4:00010000 6:10000100 4:00000000 8:00000000",
    "6:00110000 7:10000000 0:00000000 6:00101000",
    "4:10000000 8:00000000 6:10000100 6:00000010",
    "0:00110000 6:10010011 7:10000000 4:00011000",
    "6:11001010 0:00000000 6:00010011 7:00000101",
    "4:00000000 4:00000001 6:00010010 8:10000000",
]
BINARY_LENGTHS = [22.15625, 20.53125, 23.0, 20.53125, 16.3125, 21.40625]
GAR = [*BINARY[:4], "6:01001010 " + BINARY[4].split(" ", 1)[1], "4:00000000 4:00000011 " + BINARY[5].split(" ", 2)[2]]
GAR_LENGTHS = [22.15625, 19.6875, 22.875, 20.53125, 16.78125, 20.3125]
GAR_FACTORS = [
    [[], [1.0, 0.25], [], []],
    [[1.0, 0.25], [], [], [1.0, 0.25]],
    [[], [], [1.0, 0.25], []],
    [[1.0, 0.25], [0.5, 0.75, 1.0, 0.25], [], [1.0, 0.25]],
    [[0.625, 1.0, 0.25], [], [1.0, 0.25, 0.625], [0.25, 1.0]],
    [[], [0.25, 1.0], [0.25, 1.0], []],
]
LONG_REASON = (
    "grader raised: JudgeCallError: HTTP 429 [rate limited] after 4 tries against http://127.0.0.1:8000/v1 "
    "(the server said: too many requests, retry after 30 s)"
)


def write_run(
    folder: Path,
    steps: list[str],
    lengths: list[float],
    factors: list[list[list[float]]] | None = None,
    summary: dict | None = None,
    fallback: str | None = None,
    tools: bool = False,
) -> Path:
    """A TRL run folder as ``whileai train`` leaves it: trainer_state.json, completions/*.parquet, and for a grader
    arm grading.jsonl; ``fallback`` makes the first graded group fall back with that reason."""
    import pyarrow as pa

    (folder / "completions").mkdir(parents=True)
    history, grading = [], []
    for step, (groups, length) in enumerate(zip(steps, lengths, strict=True), start=1):
        rows = []
        for index, group in enumerate(groups.split()):
            digit, verdicts = group.split(":")
            rewards = [float(v) for v in verdicts]
            mean = sum(rewards) / len(rewards)
            for reward in rewards:
                rows.append(
                    {
                        "step": step,
                        "prompt": f"task {digit} please repeat the digit",
                        "completion": f"{digit} done" if reward else "no",
                        "whileai_group": f"{step}.0:{index}",
                        "whileai_reward": reward,
                        "advantage": reward - mean,
                    }
                )
            if factors is not None:
                scores = factors[step - 1][index]
                reason = fallback if fallback and not grading and any(rewards) else None
                grading.append(
                    {
                        "step": step,  # as TRL counts: the first step is 1
                        "task_id": f"echo-{digit}",
                        "rewards": rewards,
                        "passed": [bool(r) for r in rewards],
                        "scores": [] if reason else scores,
                        "hacks": [],
                        "graded": any(rewards),
                        "reason": reason,
                        "failure": "http 429" if reason else None,
                        "seconds": 0.0004 if any(rewards) else 0.0,
                        "phase": "train",
                    }
                )
        pq.write_table(pa.Table.from_pylist(rows), folder / "completions" / f"completions_{step:05d}.parquet")
        rewards = [r["whileai_reward"] for r in rows]
        mean = sum(rewards) / len(rewards)
        entry = {
            "step": step,
            "reward": mean,
            "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)),
            "frac_reward_zero_std": sum(set(g.split(":")[1]) != {"0", "1"} for g in groups.split()) / 4,
            "completions/mean_length": length,
            "whileai/pass_rate": mean,
        }
        if tools:
            entry["tools/call_frequency"] = 1.25
        if factors is not None:
            scores = [s for g in factors[step - 1] for s in g]
            entry.update(
                {
                    "groupwise/groups": 4.0,
                    "groupwise/mixed": float(sum(len(set(g.split(":")[1])) == 2 for g in groups.split())),
                    "groupwise/grader_calls": float(sum(bool(g) for g in factors[step - 1])),
                    "groupwise/fallbacks": 0.0,
                    "groupwise/hacks_zeroed": 0.0,
                    "groupwise/score_mean": sum(scores) / len(scores) if scores else 0.0,
                    "groupwise/score_std": 0.35 if scores else 0.0,
                }
            )
        history.append(entry)
    history.append({"step": len(steps), "train_runtime": 2.6})
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    if grading:
        (folder / "grading.jsonl").write_text("".join(json.dumps(g) + "\n" for g in grading))
    (folder / "whileai_run.json").write_text(json.dumps(summary or {"scale_rewards": "none"}))
    return folder


def two_arms(root: Path, scale: str = "none") -> tuple[Path, Path]:
    """The README's two runs, each with the gate's verdict its whileai_run.json keeps."""
    skipped = {"verdict": "skipped", "skipped": "no grader: a binary arm"}
    summary = {"scale_rewards": scale, "spread": skipped}
    binary = write_run(root / "runs" / "tiny_cpu_binary", BINARY, BINARY_LENGTHS, summary=summary)
    grader = {"fallbacks": {}, "first_failures": {}}
    summary = {"scale_rewards": "none", "grader": grader, "spread": {"verdict": "yes", "skipped": None}}
    gar = write_run(root / "runs" / "tiny_cpu_gar", GAR, GAR_LENGTHS, GAR_FACTORS, summary)
    return binary, gar


def busy_run(root: Path) -> Path:
    """The gar run with everything a report can show: a judge, a fallback with a long reason, tool calls."""
    judge = {"calls": 18, "retries": 4, "cache_hits": 2, "tokens_in": 91234, "tokens_out": 1803}
    judge.update(latency_p50_s=0.21, latency_p95_s=0.93, failures={"http 429": 1})
    grader = {"fallbacks": {"http 429": 1}, "first_failures": {"http 429": LONG_REASON}, "judge": judge}
    summary = {"scale_rewards": "none", "grader": grader}
    return write_run(root / "busy", GAR, GAR_LENGTHS, GAR_FACTORS, summary, fallback=LONG_REASON, tools=True)


def report_at(columns: int, *args: object) -> subprocess.CompletedProcess:
    """``whileai report`` in a real process whose terminal is ``columns`` wide."""
    env = {**os.environ, "COLUMNS": str(columns)}
    command = [sys.executable, "-m", "whileai.cli.main", "report", *map(str, args)]
    return child_processes.run(command, capture_output=True, text=True, env=env, timeout=120)


def assert_fits(text: str, columns: int = 80) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > columns]
    assert not too_wide, "\n".join(too_wide)
    assert "\u2026" not in text, text  # Rich's ellipsis: a cut cell


# ---------------------------------------------------------------- the default summary and --steps at 80 columns


def test_the_summary_and_the_step_table_fit_80_columns(tmp_path: Path) -> None:
    busy = busy_run(tmp_path)
    binary, gar = two_arms(tmp_path)
    for args in ([busy], [busy, "--steps"], [binary, gar], [binary, gar, "--steps"]):
        done = report_at(80, *args)
        assert done.returncode == 0, done.stderr
        assert_fits(done.stdout)
    # the judge's figures and the fallbacks by kind are all there, the long first failure wrapped, not cut
    done = report_at(80, busy)
    words = " ".join(done.stdout.split())
    for text in ("judge calls (retries) 18 (4)", "judge cache hits 2", "judge tokens in / out 91234 / 1803"):
        assert text in words, text
    assert "judge call p50 / p95 0.210 s / 0.930 s" in words and "judge failed: http 429 1" in words
    assert "fell back: http 429 1" in words and "first http 429" in words
    assert "retry after 30 s)" in words and "[rate limited]" in words  # all of it, square brackets too


def test_the_summary_gives_both_windows_with_clustered_intervals(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _, gar = two_arms(Path("."))
    result = runner.invoke(app, ["report", str(gar)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert lines[0] == f"run {gar}: 6 logged steps, 32 completions in 4 groups a step"
    assert lines[1] == "steps 1-3 steps 4-6"
    rate = clustered_interval([(g.split(":")[1].count("1"), 8) for step in GAR[:3] for g in step.split()])
    assert lines[2] == f"pass rate (95% CI) {rate.rate:.2f} ({rate.low:.2f} to {rate.high:.2f}) 0.23 (0.15 to 0.34)"
    assert lines[3] == "n=96 in 12 groups n=96 in 12 groups"
    assert lines[4] == "mean length 21.6 tokens 19.2 tokens"
    assert "grader 24 groups, 18 mixed, 18 graded" in lines and "factors 28: mean 0.625, std 0.349" in lines
    assert "fallbacks none" in lines
    # the per-step table is --steps' business
    assert "zero-std" not in result.stdout and "per step" not in result.stdout
    # a window wider than the run is one window
    whole = runner.invoke(app, ["report", str(gar), "--window", "6"], env={"COLUMNS": "80"})
    assert " ".join(whole.stdout.splitlines()[1].split()) == "steps 1-6"


def test_a_run_shorter_than_two_windows_is_split_in_halves(tmp_path: Path) -> None:
    def windows(run: Path) -> str:
        shown = runner.invoke(app, ["report", str(run)], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, shown.stderr
        return next(" ".join(line.split()) for line in shown.stdout.splitlines() if line.lstrip().startswith("steps"))

    four = write_run(tmp_path / "four", GAR[:4], GAR_LENGTHS[:4], GAR_FACTORS[:4])
    assert windows(four) == "steps 1-2 steps 3-4"  # never steps 1-3 beside steps 2-4
    five = write_run(tmp_path / "five", GAR[:5], GAR_LENGTHS[:5], GAR_FACTORS[:5])
    assert windows(five) == "steps 1-2 steps 4-5"


def test_a_grader_that_ranked_nothing_shows_no_factor_mean(tmp_path: Path) -> None:
    nothing = [[[] for _ in range(4)] for _ in GAR]
    run = write_run(tmp_path / "run", GAR, GAR_LENGTHS, nothing)
    result = runner.invoke(app, ["report", str(run)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert "factors              none (nothing was ranked)" in result.stdout
    steps = runner.invoke(app, ["report", str(run), "--steps"], env={"COLUMNS": "200"})
    factor_means = [line.split("│")[-2].strip() for line in steps.stdout.splitlines() if "│" in line]
    assert factor_means == ["\u2013"] * 6  # no factor mean of nothing at any step
    data = json.loads(runner.invoke(app, ["report", str(run), "--json"]).stdout)
    grader = data["reports"][0]["grader"]
    assert grader["factors"] == 0 and grader["factor_mean"] is None and grader["factor_std"] is None


def test_steps_prints_the_per_step_table_and_names_what_it_left_out(tmp_path: Path) -> None:
    busy = busy_run(tmp_path)
    wide = runner.invoke(app, ["report", str(busy), "--steps"], env={"COLUMNS": "200"})
    assert wide.exit_code == 0, wide.stderr
    header = next(line for line in wide.stdout.splitlines() if "┃" in line)
    titles = [t.strip() for t in header.split("┃")]
    assert titles == [
        "step",
        "pass rate",
        "95% CI",
        "reward",
        "reward std",
        "zero-std share",
        "length",
        "tool calls",
        "mixed",
        "fell back",
        "hacks",
        "factor mean",
        "factor std",
    ]
    assert "left out" not in wide.stdout
    assert f"run {busy}, per step, the pass rate's 95% CI over the step's groups (n=32 in 4 groups)" in wide.stdout
    first = clustered_interval([(g.split(":")[1].count("1"), 8) for g in GAR[0].split()])
    cells = [c.strip() for c in next(line for line in wide.stdout.splitlines() if "│" in line).split("│")]
    assert cells[:3] == ["1", f"{first.rate:.2f}", f"{first.low:.2f}\u2013{first.high:.2f}"]

    narrow = report_at(80, busy, "--steps")
    assert_fits(narrow.stdout)
    note = " ".join(narrow.stdout.split("left out at 80 columns:")[1].split())
    assert note.startswith("reward std, factor std, reward") and "--json shows them" in note
    for title in ("pass", "95% CI", "length", "tool", "mixed", "hacks"):
        assert title in narrow.stdout, title
    # folded over two lines, the zero-std column still says it holds a share of the groups, not a count of them
    lines = [line for line in narrow.stdout.splitlines() if "┃" in line]
    assert "zero-std" in lines[0] and "share" in lines[1] and "groups" not in "".join(lines)


# ---------------------------------------------------------------- two arms, --json, what it cannot read


def test_two_arms_get_a_block_with_the_paired_difference(tmp_path: Path) -> None:
    binary, gar = two_arms(tmp_path)
    result = runner.invoke(app, ["report", str(binary), str(gar)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    block = result.stdout.split("final pass rate, ")[1].splitlines()
    assert block[0] == "tiny_cpu_gar minus tiny_cpu_binary, last 3 logged steps"
    assert [line.split("  ")[0] for line in block[1:]] == ["difference", "95% CI", "n", "note"]
    data = json.loads(runner.invoke(app, ["report", str(binary), str(gar), "--json"]).stdout)["comparison"]
    assert data["paired"] and data["tasks"] == 5 and data["n_a"] == data["n_b"] == 96 and data["window"] == 3
    sign = "\u2212" if data["difference"] < 0 else "+"
    assert block[1].split()[1:] == [f"{sign}{abs(data['difference']) * 100:.1f}", "points"]
    assert "(bootstrap over tasks)" in block[2] and "paired over 5 tasks (96 and 96 completions)" in block[3]
    assert "not comparable" not in result.stderr
    # the scale warning stays
    other = tmp_path / "other"
    binary, gar = two_arms(other, scale="group")
    warned = runner.invoke(app, ["report", str(binary), str(gar)])
    assert "different trainer.scale_rewards (group and none): not comparable" in warned.stderr


def test_arms_with_no_task_in_common_are_compared_unpaired(tmp_path: Path) -> None:
    binary = write_run(tmp_path / "a", BINARY, BINARY_LENGTHS)
    moved = [" ".join(f"9{g}" for g in step.split()) for step in GAR]
    gar = write_run(tmp_path / "b", moved, GAR_LENGTHS)
    result = runner.invoke(app, ["report", str(binary), str(gar)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert "(Newcombe, groups as clusters)" in result.stdout and "96 and 96 completions" in result.stdout


def test_json_keeps_its_keys_and_adds_the_summary(tmp_path: Path) -> None:
    binary, gar = two_arms(tmp_path)
    data = json.loads(runner.invoke(app, ["report", str(binary), str(gar), "--json"]).stdout)
    run = data["reports"][1]
    assert {"path", "kind", "steps", "pass_rates", "grader", "run"} <= set(run)
    assert {"difference", "low", "high", "paired", "tasks", "text", "a", "b"} <= set(data["comparison"])
    step = run["pass_rates"][0]
    assert {"step", "passes", "n", "rate", "low", "high"} <= set(step)
    assert step["n"] == 32 and step["groups"] == 4 and step["design_effect"] >= 1
    summary = run["summary"]
    assert summary["window"] == 3 and summary["steps"] == 6 and "cluster" in summary["interval"]
    first, last = summary["first"], summary["last"]
    assert first["steps"] == [1, 3] and last["steps"] == [4, 6]
    assert first["pass_rate"]["n"] == 96 and first["pass_rate"]["groups"] == 12
    assert first["mean_length"] == pytest.approx(sum(GAR_LENGTHS[:3]) / 3)
    assert run["grader"]["factors"] == 28 and run["grader"]["factor_mean"] == pytest.approx(0.625)


@pytest.mark.parametrize("name", ["rows.jsonl", "notes.txt", "list.json", "completions_00001.parquet"])
def test_a_file_report_cannot_read_says_what_it_reads(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    contents = {"rows.jsonl": '{"a": 1}\n{"a": 2}\n', "notes.txt": "hello", "list.json": "[1, 2]"}
    if name in contents:
        path.write_text(contents[name])
    else:
        path.write_bytes(b"PAR1\x15\x04\x15\xff\xfe\x00\x80" * 4)
    result = runner.invoke(app, ["report", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"whileai: error: {path}: "), result.stderr
    assert "a report written by `whileai spread --json`, a TRL run folder (with trainer_state.json)" in lines[0]


# ---------------------------------------------------------------- the README's example


def test_the_readme_example_is_what_report_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (REPO / "docs" / "reports.md").read_text()  # the README's pointer for reading a report
    command, expected = re.search(r"```text\n\$ (whileai report [^\n]+)\n(.*?)```", readme, re.S).groups()
    monkeypatch.chdir(tmp_path)
    two_arms(Path("."))
    result = runner.invoke(app, command.split()[1:], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert [line.rstrip() for line in result.stdout.splitlines()] == expected.splitlines()


# ---------------------------------------------------------------- the interval: each group a cluster


def test_clustered_interval_covers_where_pooled_wilson_does_not() -> None:
    """Groups whose pass chance varies (a beta-binomial, intra-group correlation 0.3, 12 groups of 8): the
    clustered interval keeps its 95% coverage; Wilson on the pooled 96 completions covers about three times in
    four."""
    rng = random.Random(0)
    truth, rho = 0.2, 0.3
    a, b = truth * (1 - rho) / rho, (1 - truth) * (1 - rho) / rho
    clustered = pooled = 0
    draws = 1000
    for _ in range(draws):
        groups = []
        for _ in range(12):
            chance = rng.betavariate(a, b)
            groups.append((sum(rng.random() < chance for _ in range(8)), 8))
        rate = clustered_interval(groups)
        clustered += rate.low <= truth <= rate.high
        low, high = wilson_interval(rate.passes, rate.n)
        pooled += low <= truth <= high
    assert clustered / draws >= 0.93 and pooled / draws <= 0.85, (clustered, pooled)


@given(st.lists(st.tuples(st.integers(0, 16), st.integers(1, 16)), min_size=1, max_size=40))
def test_clustered_interval_is_never_narrower_than_pooled_wilson(raw) -> None:
    groups = [(min(y, m), m) for y, m in raw]
    rate = clustered_interval(groups)
    assert rate.n == sum(m for _, m in groups) and rate.groups == len(groups) and rate.design_effect >= 1
    assert 0.0 <= rate.low <= rate.rate <= rate.high <= 1.0
    low, high = wilson_interval(rate.passes, rate.n)
    assert rate.high - rate.low >= high - low - 1e-9


def test_clustered_interval_docstring_and_t_quantiles() -> None:
    import doctest

    import whileai.stats

    failures, _ = doctest.testmod(whileai.stats)
    assert failures == 0
    # scipy.stats.t.ppf(q, df), written out so that the check runs where scipy is not installed (CI)
    exact = {
        (0.975, 1): 12.706204736174694,
        (0.975, 2): 4.302652729749462,
        (0.975, 3): 3.1824463052837078,
        (0.975, 4): 2.7764451051977934,
        (0.975, 5): 2.5705818356363146,
        (0.975, 8): 2.306004135204166,
        (0.975, 10): 2.228138851986274,
        (0.975, 30): 2.0422724563012378,
        (0.975, 100): 1.9839715185235518,
        (0.8, 2): 1.0606601717798214,
        (0.8, 3): 0.9784723123633042,
        (0.8, 4): 0.9409645772351816,
    }
    for (q, df), value in exact.items():
        assert t_quantile(q, df) == pytest.approx(value, abs=0.005), (q, df)


def test_a_step_whose_every_grader_call_fell_back_shows_no_factor_mean() -> None:
    from whileai.cli.report import _step_cell

    row = {"groupwise/grader_calls": 4.0, "groupwise/fallbacks": 4.0, "groupwise/score_mean": 0.0}
    assert _step_cell("groupwise/score_mean", row) == "\u2013"
    assert (
        _step_cell("groupwise/score_mean", {**row, "groupwise/fallbacks": 1.0, "groupwise/score_mean": 0.6}) == "0.600"
    )


def test_a_verifier_that_scored_nothing_reads_as_unscored_with_its_failures(tmp_path: Path) -> None:
    """Completion logs whose rewards are all NaN (a verifier down) are unscored completions, not "no completion logs";
    the run's record of the verifier's failures is shown with them."""
    import pyarrow as pa

    failures = {"failures": 96, "kinds": {"ConnectionError": 96}, "first": "check (checks.py, line 7): it raised "
                "ConnectionError: sandbox down", "unscored": 96, "completions": 192}  # fmt: skip
    summary = {"scale_rewards": "none", "verifier": failures, "stopped_by_verifier": {"step": 6, "why": "..."}}
    run = write_run(tmp_path / "run", BINARY, BINARY_LENGTHS, summary=summary)
    for path in sorted((run / "completions").glob("*.parquet"))[3:]:  # steps 4-6: the sandbox went down
        rows = pq.read_table(path).to_pylist()
        pq.write_table(pa.Table.from_pylist([{**row, "whileai_reward": math.nan} for row in rows]), path)
    result = runner.invoke(app, ["report", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "no completion logs" not in result.stdout
    assert any(line.startswith("pass rate 0.12 (0.07 to 0.22)") and line.endswith("none scored") for line in lines), (
        lines
    )
    assert "unscored 0 completions 96 completions" in lines
    assert (
        "verifier failures 96 (ConnectionError x96)" in lines
        and "stopped at step 6: the verifier scored nothing" in (lines)
    )
    assert "first verifier failure check (checks.py, line 7): it raised ConnectionError: sandbox down" in lines
