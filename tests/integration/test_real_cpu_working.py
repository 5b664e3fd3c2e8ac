"""`benchmarks/real_cpu.py`'s secondary table: what the passes of each arm wrote, read from the runs' completion logs
(a wrong calculation, a boxed answer the working never reaches, calculations and characters), per window, with the
paired interval over seeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import real_cpu  # noqa: E402

RIGHT = "2 * 10 = 20\n20 - 3 = 17\n\\boxed{17}"  # 2 calculations, none wrong
WRONG = "2 * 10 = 21\n21 - 4 = 17\n\\boxed{17}"  # 2 calculations, one wrong
BARE = "\\boxed{17}"  # no working: the box is never reached


def log(folder: Path, step: int, completions: list[tuple[str, float]]) -> None:
    """One step's TRL completion log, with the columns the table reads."""
    (folder / "completions").mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "step": [step] * len(completions),
            "completion": [[{"role": "assistant", "content": text}] for text, _ in completions],
            "whileai_reward": [reward for _, reward in completions],
            "whileai_group": [f"{step}.0:0"] * len(completions),
        }
    )
    pq.write_table(table, folder / "completions" / f"completions_{step:05d}.parquet")


def test_the_table_reads_each_window_s_passes_and_pairs_the_arms_by_seed(tmp_path: Path) -> None:
    runs = {}
    for arm in ("binary", "gar"):
        for seed in ("1", "2"):
            folder = tmp_path / "runs" / arm / f"seed-{seed}"
            runs.setdefault(arm, {})[seed] = str(folder.relative_to(tmp_path))
            # first window (steps 1-2): a wrong pass and a bare pass beside a right one; failures never count
            log(folder, 1, [(WRONG, 1.0), (RIGHT, 1.0), (WRONG, 0.0)])
            log(folder, 2, [(BARE, 1.0), ("no answer", 0.0)])
            log(folder, 3, [(WRONG, 1.0)])  # between the windows: not counted
            # final window (steps 4-5): gar's passes all right; binary keeps one wrong pass in seed 2
            final = [(RIGHT, 1.0), (RIGHT, 1.0)] if arm == "gar" or seed == "1" else [(RIGHT, 1.0), (WRONG, 1.0)]
            log(folder, 4, final)
            log(folder, 5, [(WRONG, 0.0)])
            if arm == "gar":  # what its grader logged: seed 2's ranked the wrong working first at step 1
                first = {"0": 0.5, "1": 1.0} if seed == "1" else {"0": 1.0, "1": 0.5}
                logged = [
                    {"step": 1, "group": "1.0:0", "passed": [True, True, False], "graded": True, "factors": first},
                    {
                        "step": 4,
                        "group": "4.0:0",
                        "passed": [True, True],
                        "graded": True,
                        "factors": {"0": 0.75, "1": 0.75},
                    },
                    {"step": 3, "group": "3.0:0", "passed": [True], "graded": True, "factors": {"0": 1.0}},
                ]
                lines = [json.dumps({"hacks": [], "reason": None, **record}) for record in logged]
                (folder / "grading.jsonl").write_text("\n".join(lines) + "\n")
    results = tmp_path / "results"
    results.mkdir()
    record = {
        "design": {"tasks": {"word_problems": {"steps": 5}}},
        "tasks": {"word_problems": {"window": 2, "arms": {arm: {"runs": runs[arm]} for arm in runs}}},
    }
    (results / "real_cpu.json").write_text(json.dumps(record))
    (results / "real_cpu.md").write_text("### word_problems: 5 steps\n")

    table = real_cpu.working_table(results, repo=tmp_path)
    real_cpu.working_table(results, repo=tmp_path)  # a second run replaces its section, never appends another

    working = json.loads((results / "real_cpu.json").read_text())["tasks"]["word_problems"]["working"]
    first = working["figures"]["binary"]["1"]["first"]
    assert first["passes"] == 3
    assert first["wrong working"] == pytest.approx(1 / 3)
    assert first["unreached box"] == pytest.approx(1 / 3)
    assert first["calculations"] == pytest.approx(4 / 3)
    assert first["characters"] == pytest.approx((len(WRONG) + len(RIGHT) + len(BARE)) / 3)
    assert working["figures"]["binary"]["2"]["final"]["wrong working"] == 0.5
    wrong = working["differences"]["wrong working"]
    assert wrong["paired"] and wrong["n_a"] == 2
    assert wrong["difference"] == pytest.approx(-0.25)  # gar 0 in both seeds, binary 0 and 0.5
    assert "| wrong working | 33.3% → 25.0% | 33.3% → 0.0% | -25.0 pts" in table
    assert working["regraded"] == {"1": [2, 2], "2": [2, 1]}  # groups with two passes, and those ranked alike
    assert "ranks and flags 3 of the 4 groups" in table
    markdown = (results / "real_cpu.md").read_text()
    assert markdown.startswith("### word_problems: 5 steps\n")
    assert markdown.count("the working of the passes") == 1


def test_the_held_out_table_evaluates_every_run_and_the_initial_model_once(tmp_path: Path, monkeypatch) -> None:
    import processes

    runs = {arm: {seed: f"runs/{arm}/seed-{seed}" for seed in ("1", "2")} for arm in ("binary", "gar")}
    results = tmp_path / "results"
    results.mkdir()
    record = {"tasks": {"word_problems": {"window": 2, "arms": {arm: {"runs": runs[arm]} for arm in runs}}}}
    (results / "real_cpu.json").write_text(json.dumps(record))
    (results / "real_cpu.md").write_text("### word_problems: 5 steps\n")
    asked = []

    def evaluate(command: list[str], timeout_s: float, cwd: Path) -> processes.Finished:
        asked.append(command[command.index("eval") + 1 :])
        passes = 2 if "--initial" in command else 6
        rate = {"passes": passes, "n": 16, "groups": 2, "rate": passes / 16, "low": 0.0, "high": 1.0}
        data = {
            "pass_rate": rate,
            "mean_length_tokens": 40.0,
            "per_prompt": [{"prompt": "word-9", "passes": passes, "n": 16}],
        }
        return processes.Finished(command, 0, json.dumps(data), "", 1.0)

    monkeypatch.setattr(processes, "run_in_group", evaluate)
    table = real_cpu.held_out_table(results, repo=tmp_path, prompts=2)
    assert [a for a in asked if "--initial" in a] == [
        [str(tmp_path / "runs/binary/seed-1"), "--prompts", "2", "--json", "--initial"]
    ]
    assert sorted(a[0] for a in asked if "--initial" not in a) == sorted(
        str(tmp_path / f) for r in runs.values() for f in r.values()
    )
    assert "| initial | - | 12.5% [0.0%, 100.0%] | 40.0 |" in table and table.count("| 37.5% [") == 4
    assert "2 held-out problems x 8 completions" in table
    held = json.loads((results / "real_cpu.json").read_text())["tasks"]["word_problems"]["held_out"]
    assert [row["model"] for row in held] == ["initial", "binary", "binary", "gar", "gar"]
    assert all("per_prompt" in row for row in held)
