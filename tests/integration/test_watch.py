"""The spread watch on real TRL runs of the offline recipe, with graders that go bad once step 6 is graded
(``watch_graders.py``): to constant scores, to the order they are shown, to failing calls. Each is caught within
``patience * every_steps`` steps of going bad; ``on_fail: stop`` ends the run at a checkpoint with exit 5, and a resume
with a good grader goes on from there. With a grader that stays good, the watch changes nothing TRL trains on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("trl")

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
GRADERS = Path(__file__).resolve().parent / "watch_graders.py"
runner = CliRunner()
BAD_AFTER_STEP = 6  # the recipe grades 4 groups a step
WATCH = ["spread.watch.every_steps=2", "spread.watch.patience=2", "spread.watch.max_extra_calls=0.5"]
RUN = ["trainer.max_steps=16", "trainer.save_steps=100", "data.num_prompts=16", "spread.sample.prompts=8"]


def _train(out: Path, grader: str, monkeypatch, *extra: str):
    """The offline recipe with a grader of ``watch_graders.py`` in its rule's place."""
    monkeypatch.setenv("WHILEAI_TEST_GRADING_LOG", str(out / "grading.jsonl"))
    monkeypatch.setenv("WHILEAI_TEST_DEGRADE_AFTER", str(4 * BAD_AFTER_STEP))
    args = ["train", str(_recipe(out, grader)), *RUN, *WATCH, f"output_dir={out}", *extra]
    return runner.invoke(app, args, catch_exceptions=False)


def _recipe(out: Path, grader: str) -> Path:
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["grader"] = {"kind": "python", "function": f"{GRADERS}:{grader}", "thread_safe": True}
    path = out.parent / f"{out.name}-{grader}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _checks(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "watch.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("grader", "rule"),
    [("constant", "std"), ("position", "controls"), ("longer", "controls"), ("failing", "broken")],
)
def test_the_watch_stops_a_run_whose_grader_went_bad(tmp_path: Path, monkeypatch, grader: str, rule: str) -> None:
    out = tmp_path / grader
    result = _train(out, grader, monkeypatch, "spread.watch.on_fail=stop")
    assert result.exit_code == 5, result.stderr + result.stdout
    checks = _checks(out)
    # the grader goes bad once step 6's groups are graded: step 6's controls may already meet it
    assert [c["verdict"] for c in checks if c["step"] < BAD_AFTER_STEP] == ["yes", "yes"]
    stop = checks[-1]
    assert stop["stop"] and stop["failed_in_a_row"] == 2 and stop["rule"] == rule, stop
    assert stop["step"] <= BAD_AFTER_STEP + 2 * 2, "caught later than patience * every_steps steps"
    first_failed = next(c["step"] for c in checks if c["failed"])
    assert f"the watch failed at step {first_failed} " in result.stderr
    assert f"the watch failed at step {stop['step']} " in result.stderr and "stopping the run" in result.stderr
    assert "the spread watch stopped training at step" in result.stdout
    summary = json.loads((out / "whileai_run.json").read_text())
    assert summary["status"] == "stopped by the watch" and summary["stopped_by_watch"]["step"] == stop["step"]
    assert (out / f"checkpoint-{stop['step']}").is_dir() and not (out / "final").exists()
    state = json.loads((out / "trainer_state.json").read_text())
    logged = [row for row in state["log_history"] if "whileai/watch/failed" in row]
    assert [row["step"] for row in logged] == [c["step"] for c in checks]
    if grader == "position":  # the ranking follows the shown order: reordered, or a copy placed apart, it moves
        assert all(c["why"].startswith("spread: no. The scores vary, but") for c in checks if c["failed"])
        assert any((c["control_tau"] or 1) < 0.5 or (c["copies_tied"] or 1) < 1 for c in checks if c["failed"])
    if grader == "constant":
        assert any("since the last passing check: std" in line for line in result.stderr.splitlines())
    if grader == "longer":  # it reads the work but pays for its surface: the watch names what and how far it moved
        assert stop["paid_for"] and "the grader pays for" in stop["why"] and "the grader pays for" in result.stderr
        shown = runner.invoke(app, ["report", str(out), "--steps"], env={"COLUMNS": "200"}).stdout
        assert "paid" in shown and ", ".join(stop["paid_for"]) in shown


@pytest.mark.slow
def test_a_resume_with_a_good_grader_goes_on_from_the_watch_s_checkpoint(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    assert _train(out, "constant", monkeypatch, "spread.watch.on_fail=stop").exit_code == 5
    stopped = json.loads((out / "whileai_run.json").read_text())["stopped_by_watch"]["step"]
    # Another grader of the same kind (a resume may not change the arm): the stopped run's grader, mended.
    good = ["train", str(_recipe(out, "good")), *RUN, *WATCH, "spread.watch.on_fail=stop", f"output_dir={out}"]
    good.append("--resume")
    result = runner.invoke(app, good, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert f"resuming from checkpoint-{stopped}" in result.stderr
    assert "the spread gate runs again: the recipe's grader changed" in result.stderr
    summary = json.loads((out / "whileai_run.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 16 and (out / "final").is_dir()
    after = [c for c in _checks(out) if c["step"] > stopped]
    assert after and all(c["verdict"] == "yes" for c in after)


@pytest.mark.slow
def test_warn_says_it_once_per_change_trains_on_and_the_run_reports_it(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "warn"
    result = _train(out, "constant", monkeypatch)
    assert result.exit_code == 0, result.stderr
    failed = [c for c in _checks(out) if c["failed"]]
    assert len(failed) >= 3 and not any(c["stop"] for c in failed)
    kinds = []  # what failed, check by check: each change said once, a repeat not again
    for check in failed:
        kind = check["rule"]
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
    assert result.stderr.count("the watch failed at step") == len(kinds) < len(failed)
    assert json.loads((out / "whileai_run.json").read_text())["status"] == "finished"
    # whileai report shows the checks (and draws them); whileai spread reruns the gate on a window of the run
    checks = _checks(out)
    data = json.loads(runner.invoke(app, ["report", str(out), "--json"]).stdout)
    assert data["reports"][0]["watch"] == checks
    shown = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "80"})
    failed = sum(c["failed"] for c in checks)
    assert f"{len(checks)} checks, {failed} failed" in shown.stdout and "std 0.000 is below" in shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    plot = tmp_path / "watch.png"
    assert runner.invoke(app, ["report", str(out), "--plot", str(plot)]).exit_code == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
    # the gate again on the run's own rollouts of steps 1-4, with the recipe's rule (the run's grader went bad)
    window = runner.invoke(app, ["spread", str(out), "--window", "1:4", "--recipe", str(RECIPE), "--json"])
    assert window.exit_code in (0, 1), window.stderr
    assert json.loads(window.stdout)["rows"]["read"] == 4 * 32
    assert runner.invoke(app, ["spread", str(out), "--window", "4", "--recipe", str(RECIPE)]).exit_code == 2
    outside = runner.invoke(app, ["spread", str(out), "--window", "50:", "--recipe", str(RECIPE)])
    assert outside.exit_code == 2 and "no completion log" in outside.stderr


@pytest.mark.slow
def test_the_watch_changes_nothing_that_trains(tmp_path: Path) -> None:
    def history(out: Path, *extra: str) -> list[dict]:
        args = ["train", str(RECIPE), "trainer.max_steps=8", "data.num_prompts=8", "spread.sample.prompts=8", *WATCH,
                f"output_dir={out}", *extra]  # fmt: skip
        assert runner.invoke(app, args, catch_exceptions=False).exit_code == 0
        rows = json.loads((out / "trainer_state.json").read_text())["log_history"]
        timing = ("step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second")
        timing += ("groupwise/grader_seconds",)  # the grader's wall time, not what trains
        return [{k: v for k, v in r.items() if not k.startswith("whileai/watch/") and k not in timing} for r in rows]

    watched = history(tmp_path / "watched")
    assert len(_checks(tmp_path / "watched")) == 4
    assert any(c["controls_sent"] for c in _checks(tmp_path / "watched"))  # the controls did call the grader
    assert watched == history(tmp_path / "plain", "spread.watch.enabled=false")
    assert not (tmp_path / "plain" / "watch.jsonl").exists()


@pytest.mark.slow
def test_a_step_trl_scores_in_two_generations_is_checked_whole(tmp_path: Path) -> None:
    out = tmp_path / "two"
    args = ["train", str(RECIPE), "trainer.max_steps=4", "data.num_prompts=16", "spread.sample.prompts=8", *WATCH,
            "trainer.gradient_accumulation_steps=2", "trainer.steps_per_generation=1", f"output_dir={out}"]  # fmt: skip
    assert runner.invoke(app, args, catch_exceptions=False).exit_code == 0
    graded = [json.loads(line) for line in (out / "grading.jsonl").read_text().splitlines()]
    assert sum(g["step"] == 1 for g in graded) == 8  # two generations of 4 groups in one step
    checks = _checks(out)
    assert [c["step"] for c in checks] == [2, 4]
    for check in checks:  # each read every group of its two steps that a grader could tell apart
        first, last = check["steps"]
        gradable = [g for g in graded if first <= g["step"] <= last and sum(g["passed"]) >= 2 and not g["reason"]]
        assert sum(first <= g["step"] <= last for g in graded) == 16
        assert check["groups"] == len(gradable), check


@pytest.mark.slow
def test_a_check_due_after_the_last_generation_is_made_when_training_ends(tmp_path: Path) -> None:
    out = tmp_path / "once"  # one generation serves steps 1-4: the checks of steps 2 and 4 come due after it
    args = ["train", str(RECIPE), "trainer.max_steps=4", "data.num_prompts=16", "spread.sample.prompts=8", *WATCH,
            "trainer.steps_per_generation=4", f"output_dir={out}"]  # fmt: skip
    assert runner.invoke(app, args, catch_exceptions=False).exit_code == 0
    checks = _checks(out)
    assert [(c["step"], c["verdict"]) for c in checks] == [(2, "yes"), (4, "too few")]
