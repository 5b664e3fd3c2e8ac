"""Arms over seeds (whileai.reports.experiments) on run folders written here: the arm and seed each run records,
per-step bands, final-window differences paired by seed, and `whileai report` printing and drawing them."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.errors import BadInput
from whileai.reports.experiments import run_arm, run_seed, seed_difference, seed_experiment

# Reference values from scipy.stats (t.ppf, t.interval, ttest_ind(...).confidence_interval), written out so that
# these tests run where scipy is not installed (CI).
T975 = {2: 4.302652729749462, 4: 2.7764451051977934}
T80_4 = 0.9409645772351816


def experiment_table(results: dict) -> str:
    """``benchmarks/figure8.py``'s tables, the one place they are written."""
    spec = importlib.util.spec_from_file_location("figure8", Path(__file__).parents[2] / "benchmarks" / "figure8.py")
    assert spec is not None and spec.loader is not None
    figure8 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figure8)
    return figure8.experiment_table(results)


def sem(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def write_run(folder: Path, seed: int, steps: list[dict], recipe: str | None) -> Path:
    folder.mkdir(parents=True)
    history = [{"step": i + 1, **row} for i, row in enumerate(steps)]
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    if recipe is not None:
        (folder / "recipe.yaml").write_text(recipe + f"\ntrainer:\n  seed: {seed}\n")
    return folder


BINARY = "verifier:\n  builtin: echoes_digits"
GAR = "grader:\n  kind: scripted\ngrading:\n  mode: advantage"


def grid(tmp_path: Path, final: dict[str, list[float]]) -> list[Path]:
    """Two arms, one run per seed: pass rate 0.5 then the given final value; length 20 then 30 or 15."""
    folders = []
    for arm, values in final.items():
        for seed, value in enumerate(values, start=1):
            length = 30.0 if arm == "binary" else 15.0
            steps = [{"whileai/pass_rate": 0.5, "completions/mean_length": 20.0}] * 4
            steps += [{"whileai/pass_rate": value, "completions/mean_length": length + seed}] * 4
            recipe = BINARY if arm == "binary" else GAR
            folders.append(write_run(tmp_path / arm / f"seed-{seed}", seed, steps, recipe))
    return folders


def test_each_run_says_its_arm_and_seed(tmp_path: Path) -> None:
    binary = write_run(tmp_path / "a", 3, [{"whileai/pass_rate": 0.5}], BINARY)
    gar = write_run(tmp_path / "b", 4, [{"whileai/pass_rate": 0.5}], GAR)
    named = write_run(tmp_path / "c", 5, [{"whileai/pass_rate": 0.5}], "comparison_arm: mine\n" + GAR)
    bare = write_run(tmp_path / "arm-x" / "run-9", 0, [{"whileai/pass_rate": 0.5}], None)
    assert [run_arm(f) for f in (binary, gar, named, bare)] == ["binary", "gar", "mine", "arm-x"]
    assert [run_seed(f) for f in (binary, gar, named, bare)] == ["3", "4", "5", "run-9"]


def test_the_paired_difference_is_the_paired_t_interval() -> None:
    a = {"1": 0.50, "2": 0.61, "3": 0.42, "4": 0.55, "5": 0.47}
    b = {"1": 0.71, "2": 0.66, "3": 0.63, "4": 0.52, "5": 0.70}
    diff = seed_difference(a, b)
    diffs = [b[k] - a[k] for k in a]
    mean = sum(diffs) / 5
    low, high = mean - T975[4] * sem(diffs), mean + T975[4] * sem(diffs)
    assert diff.paired and diff.n_a == diff.n_b == 5
    assert diff.difference == pytest.approx(sum(diffs) / 5)
    assert (diff.low, diff.high) == pytest.approx((low, high), abs=2e-3)
    assert diff.detectable == pytest.approx((T975[4] + T80_4) * sem(diffs), abs=2e-3)


def test_different_seeds_give_welchs_interval() -> None:
    a = {"1": 0.50, "2": 0.61, "3": 0.42}
    b = {"4": 0.71, "5": 0.66, "6": 0.63, "7": 0.52}
    diff = seed_difference(a, b)
    low, high = -0.07024532757760626, 0.3102453275776065  # scipy's Welch interval for b - a
    assert not diff.paired
    # Welch's degrees of freedom are rounded to a whole number for the t quantile
    assert (diff.low, diff.high) == pytest.approx((low, high), abs=0.02)


def test_one_seed_has_no_interval_and_nan_runs_are_left_out() -> None:
    one = seed_difference({"1": 0.5}, {"1": 0.7})
    assert one.difference == pytest.approx(0.2) and math.isnan(one.low) and math.isnan(one.detectable)
    partly = seed_difference({"1": 0.5, "2": math.nan, "3": 0.4}, {"1": 0.7, "2": 0.6, "3": 0.5})
    assert not partly.paired and partly.n_a == 2 and partly.n_b == 3


def test_seed_experiment_bands_and_final_windows(tmp_path: Path) -> None:
    folders = grid(tmp_path, {"binary": [0.6, 0.7, 0.8], "gar": [0.8, 0.9, 0.7]})
    experiment = seed_experiment(folders, window=4, metrics=["pass rate", "length"])
    assert sorted(experiment["arms"]) == ["binary", "gar"]
    binary = experiment["arms"]["binary"]
    assert binary["seeds"] == ["1", "2", "3"]
    assert binary["first"]["pass rate"] == {"1": 0.5, "2": 0.5, "3": 0.5}
    assert binary["final"]["length"] == {"1": 31.0, "2": 32.0, "3": 33.0}
    band = binary["per_step"]["pass rate"]
    assert band["steps"] == list(range(1, 9)) and band["n"] == [3] * 8
    half = T975[2] * sem([0.6, 0.7, 0.8])
    assert band["mean"][-1] == pytest.approx(0.7) and band["high"][-1] == pytest.approx(0.7 + half, abs=1e-2)
    assert band["low"][0] == band["high"][0] == pytest.approx(0.5)  # no spread at step 1: a zero-width band
    diff = experiment["differences"]["length"]
    assert (diff["a"], diff["b"]) == ("binary", "gar")  # binary is the baseline
    assert diff["difference"] == pytest.approx(-15.0) and diff["paired"]
    table = experiment_table({"tasks": {"echo": experiment}})
    assert "| length | 20.00 → 32.00 | 20.00 → 17.00 | -15.00 [-15.00, -15.00] | 0.00 |" in table
    assert "| binary | 2 | 70.0% | 32.00 |" in table


def test_seed_experiment_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    folders = grid(tmp_path, {"binary": [0.6, 0.7]})
    twin = write_run(tmp_path / "again" / "seed-1", 1, [{"whileai/pass_rate": 0.5}], BINARY)
    with pytest.raises(BadInput, match="already has a run with seed 1"):
        seed_experiment([*folders, twin], window=2)
    with pytest.raises(BadInput, match="window must be at least 1"):
        seed_experiment(folders, window=0)
    with pytest.raises(BadInput, match="unknown metric 'reward'"):
        seed_experiment(folders, window=2, metrics=["reward"])


def test_report_prints_the_arms_over_seeds_and_draws_bands(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from whileai.cli.main import app

    folders = grid(tmp_path, {"binary": [0.6, 0.7, 0.8], "gar": [0.8, 0.9, 0.7]})
    plot = tmp_path / "figure.png"
    runner = CliRunner()
    shown = runner.invoke(app, ["report", *map(str, folders), "--window", "4"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.stderr
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    block = shown.stdout.split("over seeds, gar minus binary, last 4 logged steps, paired over 3 seeds\n")[1]
    lines = [line.split("  ") for line in block.splitlines()]
    cells = [[cell.strip() for cell in line if cell.strip()] for line in lines]
    assert cells[0] == ["difference", "95% CI", "detectable"]
    assert cells[1][:2] == ["pass rate", "+10.0 pts"] and cells[1][2].endswith("pts")
    assert cells[2] == ["length", "\u221215.00", "\u221215.00 to \u221215.00", "0.00"]
    data = json.loads(runner.invoke(app, ["report", *map(str, folders), "--plot", str(plot), "--json"]).stdout)
    assert data["arms"]["differences"]["pass rate"]["difference"] == pytest.approx(0.1)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_a_figure_only_one_arm_logs_is_left_out_of_the_table(tmp_path: Path) -> None:
    """The gar arm's watch logs whileai/watch/std; the binary arm has no watch: no 'n/a n/a to n/a n/a' row."""
    from whileai.cli.main import app

    folders = grid(tmp_path, {"binary": [0.6, 0.7], "gar": [0.8, 0.9]})
    for folder in folders[2:]:  # the gar runs: the watch's std at each step
        state = json.loads((folder / "trainer_state.json").read_text())
        for row in state["log_history"]:
            row["whileai/watch/std"] = 0.2
        (folder / "trainer_state.json").write_text(json.dumps(state))
    shown = CliRunner().invoke(app, ["report", *map(str, folders), "--window", "4"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.stderr
    block = shown.stdout.split("over seeds, gar minus binary")[1]
    assert "n/a" not in block and "watch std" not in block and "pass rate" in block
