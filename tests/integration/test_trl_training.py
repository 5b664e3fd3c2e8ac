"""A real GRPOTrainer run on the CPU with a tiny random-weight model: the advantages TRL computed are equation 3.

``whileai train`` on the offline recipe for 2 steps; then, group by group, the ``advantage`` column of TRL's
completion logs equals ``whileai.methods.redistribute`` of the verifier's rewards with the grader's factors (from
``grading.jsonl``). Also: the run directory holds what the README says, ``whileai report`` reads it, and the spread
gate refuses a grader with no spread before any model is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("trl")
pd = pytest.importorskip("pandas")

from whileai.cli.main import app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
runner = CliRunner()

SMOKE = ["trainer.max_steps=2", "trainer.logging_steps=1", "trainer.save_steps=2", "data.num_prompts=8"]
# The module's run also reports to TensorBoard (where it is installed, as the dev extra installs it) and watches its
# grader at every step, so that whileai's figures can be read back from the event files.
LOGGED = ["trainer.report_to=tensorboard", "spread.watch.every_steps=1", "spread.watch.window=1"]


BUILT: list[object] = []  # the trainers the module's run built, for the dry run to be compared with


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from whileai.integrations import trl_trainer as room

    build = room.grpo_trainer

    def keep(**kwargs):
        trainer = build(**kwargs)
        BUILT.append(trainer)
        return trainer

    out = tmp_path_factory.mktemp("run") / "gar"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(room, "grpo_trainer", keep)
        arguments = ["train", str(RECIPE), *SMOKE, f"output_dir={out}", *LOGGED]
        result = runner.invoke(app, arguments, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


@pytest.mark.slow
def test_the_dry_run_prints_the_arguments_the_run_trains_with(run_dir: Path) -> None:
    import ast

    dry = runner.invoke(
        app, ["train", str(RECIPE), *SMOKE, f"output_dir={run_dir}", *LOGGED, "--dry-run"], env={"COLUMNS": "2000"}
    )
    assert dry.exit_code == 0, dry.stderr
    (line,) = [row for row in dry.stdout.splitlines() if row.strip().startswith("GRPOConfig")]
    printed = {
        k.arg: ast.literal_eval(k.value)
        for k in ast.parse(f"f({line.split('│', 1)[1].strip()})").body[0].value.keywords
    }
    (trainer,) = BUILT
    assert {"use_cpu", "disable_tqdm", "use_vllm", "output_dir", "num_generations"} <= set(printed)
    # transformers keeps report_to as a list ("none" is no integration at all); every other field as it was passed
    normalized = {"report_to": lambda v: [] if v == "none" else [v] if isinstance(v, str) else v}
    for name, value in printed.items():
        assert getattr(trainer.args, name) == normalized.get(name, lambda v: v)(value), name


@pytest.mark.slow
def test_trl_advantages_are_equation_3(run_dir: Path, trl_signal) -> None:
    assert len(sorted((run_dir / "completions").glob("completions_*.parquet"))) == 2
    told_apart = trl_signal.assert_equation_3(run_dir, size=8)
    assert told_apart > 0, "no group had passes of different quality: the test would prove nothing"


@pytest.mark.slow
def test_run_directory_and_report(run_dir: Path) -> None:
    for name in ("recipe.yaml", "whileai_run.json", "grading.jsonl", "trainer_state.json", "final", "checkpoint-2"):
        assert (run_dir / name).exists(), name
    summary = json.loads((run_dir / "whileai_run.json").read_text())
    assert summary["started"] and summary["steps"] == 2 and summary["scale_rewards"] == "none"
    assert summary["grader"]["groups"] > 0
    # the main job's gate graded the initial model's own completions, before the first step
    gate = json.loads((run_dir / "spread_gate.json").read_text())
    assert gate["source"] == "sample" and gate["verdict"] == "yes" and gate["passed"] is True
    assert gate["spread"]["controls"]["agreement_groups"] > 0 and summary["spread"] == gate
    state = json.loads((run_dir / "trainer_state.json").read_text())
    assert any("groupwise/grader_calls" in entry for entry in state["log_history"])
    data = json.loads(runner.invoke(app, ["report", str(run_dir), "--json"]).stdout)
    run = data["reports"][0]
    assert [r["step"] for r in run["pass_rates"]] == [1, 2] and run["grader"]["groups"] == summary["grader"]["groups"]
    # each step's 32 completions are 4 groups of 8, and the intervals count groups, not completions
    assert [(r["n"], r["groups"]) for r in run["pass_rates"]] == [(32, 4), (32, 4)]
    window = run["summary"]["last"]
    assert window["steps"] == [1, 2] and (window["pass_rate"]["n"], window["pass_rate"]["groups"]) == (64, 8)
    # the default summary of a real run fits 80 columns and cuts nothing; --steps too
    for extra in ([], ["--steps"]):
        shown = runner.invoke(app, ["report", str(run_dir), *extra], env={"COLUMNS": "80"})
        assert shown.exit_code == 0 and "\u2026" not in shown.stdout, shown.stdout
        assert max(len(line) for line in shown.stdout.splitlines()) <= 80, shown.stdout
    assert "n=64 in 8 groups" in shown.stdout and "steps 1-2" in shown.stdout and "zero-std" in shown.stdout
    # the run's own completion logs feed the next spread check
    spread = runner.invoke(app, ["spread", str(run_dir / "completions"), "--recipe", str(RECIPE), "--json"])
    logged = sum(len(pd.read_parquet(p)) for p in (run_dir / "completions").glob("*.parquet"))
    assert spread.exit_code in (0, 1) and json.loads(spread.stdout)["rows"]["read"] == logged == 2 * 32


@pytest.mark.slow
def test_the_spread_gate_refuses_before_training(tmp_path: Path) -> None:
    rows = tmp_path / "tied.jsonl"
    rows.write_text("".join(json.dumps({"scenario_id": "s", "score": 1, "final_text": "x"}) + "\n" for _ in range(4)))
    out = tmp_path / "refused"
    args = ["train", str(RECIPE), *SMOKE, f"output_dir={out}", f"spread.rows={rows}", "spread.reward_key=score"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "spread: no." in result.stderr
    assert json.loads((out / "whileai_run.json").read_text())["started"] is False
    assert not (out / "base_model").exists()


@pytest.mark.slow
def test_report_compares_two_arms_and_plots(run_dir: Path, tmp_path: Path, trl_signal) -> None:
    pytest.importorskip("matplotlib")
    binary = tmp_path / "binary"
    arm = REPO / "recipes" / "tiny_cpu_binary.yaml"
    result = runner.invoke(app, ["train", str(arm), *SMOKE, f"output_dir={binary}"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert not (binary / "grading.jsonl").exists()  # the binary arm grades nothing
    # its gate is skipped, said so, and recorded as skipped (never as passed)
    assert "spread gate skipped: no grader: a binary arm" in result.stderr
    gate = json.loads((binary / "spread_gate.json").read_text())
    assert gate["verdict"] == "skipped" and gate["passed"] is None and gate["skipped"] == "no grader: a binary arm"
    # the binary arm trains on plain Dr. GRPO (scale_rewards none): r - mean(group), group by group
    for rewards, advantages in trl_signal.advantages_by_group(binary, size=8):
        mean = sum(rewards) / len(rewards)
        assert advantages == pytest.approx([r - mean for r in rewards], abs=1e-6)
    plot = tmp_path / "arms.png"
    data = json.loads(runner.invoke(app, ["report", str(binary), str(run_dir), "--plot", str(plot), "--json"]).stdout)
    comparison = data["comparison"]
    assert comparison["paired"] and comparison["low"] <= comparison["difference"] <= comparison["high"]
    assert "points, 95%" in comparison["text"]
    assert comparison["n_a"] == comparison["n_b"] == 64 and comparison["window"] == 3
    # on the terminal, the difference is a block of four short lines under its heading
    shown = runner.invoke(app, ["report", str(binary), str(run_dir)], env={"COLUMNS": "80"})
    assert shown.exit_code == 0 and max(len(line) for line in shown.stdout.splitlines()) <= 80, shown.stdout
    block = shown.stdout.split(f"final pass rate, {run_dir.name} minus {binary.name}, last 3 logged steps\n")[1]
    assert [line.split("  ")[0] for line in block.splitlines()] == ["difference", "95% CI", "n", "note"]
    assert f"paired over {comparison['tasks']} tasks (64 and 64 completions)" in block
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


@pytest.mark.slow
def test_resume_continues_the_run_and_its_grading_log(tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    first = ["train", str(RECIPE), *SMOKE, "trainer.save_steps=1", f"output_dir={out}"]
    assert runner.invoke(app, first, catch_exceptions=False).exit_code == 0
    logged = len((out / "grading.jsonl").read_text().splitlines())
    again = [*first, "trainer.max_steps=3", "--resume"]
    result = runner.invoke(app, again, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    # the gate is not run again: its recorded verdict stands, and the tiny model is not rebuilt
    assert f"the spread gate's verdict from {out / 'spread_gate.json'}: yes" in result.stderr
    assert "spread gate on" not in result.stderr and "warm start" not in result.stderr
    # the tied lm_head a checkpoint leaves out is said once, in whileai's words
    assert "missing keys" not in result.stderr
    assert result.stderr.count("does not store lm_head.weight (tied to model.embed_tokens.weight)") == 1
    summary = json.loads((out / "whileai_run.json").read_text())
    assert summary["resumed"] is True and summary["steps"] == 3
    lines = (out / "grading.jsonl").read_text().splitlines()
    assert len(lines) > logged and {json.loads(line)["step"] for line in lines[logged:]} == {3}
    assert result.stdout.strip() == f"whileai: trained 3 steps; the run is in {out}"  # the result, on stdout
    card = (out / "README.md").read_text()
    assert "None" not in card and "a fine-tuned version of the model in `" in card, card[:600]
    assert f'model="{out / "final"}"' in card

    # The run is finished: a resume says so, trains nothing and changes nothing in the folder.
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    finished = runner.invoke(app, again, catch_exceptions=False)
    assert finished.exit_code == 0, finished.stderr
    assert finished.stdout.startswith(f"whileai: this run is finished (3 of 3 steps); nothing changed in {out}")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


@pytest.mark.slow
def test_ctrl_c_says_how_to_resume_and_resume_grades_each_step_once(tmp_path: Path, monkeypatch) -> None:
    from whileai.training import callbacks as progress

    out = tmp_path / "interrupted"
    args = ["train", str(RECIPE), *SMOKE, "trainer.max_steps=4", "trainer.save_steps=2", f"output_dir={out}"]
    original = progress.RichProgress.on_step_end

    def interrupt(self, args, state, control, **kwargs):
        original(self, args, state, control, **kwargs)
        if state.global_step == 3:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(progress.RichProgress, "on_step_end", interrupt)
        stopped = runner.invoke(app, args)
    assert stopped.exit_code == 130
    assert f"checkpoint-2 is the newest checkpoint. Continue with: whileai train {RECIPE}" in stopped.stderr
    assert stopped.stderr.rstrip().endswith("--resume")
    summary = json.loads((out / "whileai_run.json").read_text())
    assert summary["status"] == "interrupted" and summary["last_checkpoint"] == "checkpoint-2"
    logged = [json.loads(line)["step"] for line in (out / "grading.jsonl").read_text().splitlines()]
    assert sorted(set(logged)) == [1, 2, 3]  # step 3 was graded, then interrupted before its checkpoint

    resumed = runner.invoke(app, [*args, "--resume"], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.stderr
    assert "resuming from checkpoint-2" in resumed.stderr
    steps = [json.loads(line)["step"] for line in (out / "grading.jsonl").read_text().splitlines()]
    per_step = {step: steps.count(step) for step in set(steps)}
    assert sorted(per_step) == [1, 2, 3, 4] and len(set(per_step.values())) == 1  # every step once, none twice
    assert json.loads((out / "whileai_run.json").read_text())["status"] == "finished"
    report = json.loads(runner.invoke(app, ["report", str(out), "--json"]).stdout)["reports"][0]
    assert report["grader"]["groups"] == len(steps) == 4 * per_step[1]

    # The resumed run repeats the uninterrupted one: its steps 3 and 4 (the next epoch of 8 prompts, 4 a step) have
    # the same prompts, completions, advantages and grades.
    whole = tmp_path / "whole"
    trained = runner.invoke(app, [*args[:-1], f"output_dir={whole}"], catch_exceptions=False)
    assert trained.exit_code == 0, trained.stderr
    for name in ("prompt", "completion", "advantage"):
        assert _logged(out, name) == _logged(whole, name), name
    grades = [
        {(g["step"], g["group"]): g["factors"] for g in map(json.loads, (run / "grading.jsonl").open())}
        for run in (out, whole)
    ]
    assert grades[0] == grades[1]


def _logged(run: Path, column: str) -> dict[int, list]:
    """One column of a run's completion logs, by step."""
    frames = [pd.read_parquet(path) for path in sorted((run / "completions").glob("*.parquet"))]
    logged = pd.concat(frames)
    return {int(step): [str(v) for v in group[column]] for step, group in logged.groupby("step")}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "overrides", "changed"),
    [
        (
            "tiny_cpu_binary.yaml",
            [],
            "grader.kind: scripted -> none; grading.mode: advantage -> none; comparison_arm: gar -> binary",
        ),
        ("tiny_cpu_gar.yaml", ["grading.mode=reward"], "grading.mode: advantage -> reward"),
    ],
    ids=["binary on a GAR run", "GRS on a GAR run"],
)
def test_a_resume_that_changes_the_arm_is_refused_and_writes_nothing(run_dir: Path, recipe, overrides, changed) -> None:
    before = {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")}
    arguments = ["train", str(REPO / "recipes" / recipe), *SMOKE, *overrides, f"output_dir={run_dir}", "--resume"]
    refused = runner.invoke(app, arguments)
    assert refused.exit_code == 2, refused.stderr
    assert f"as another arm ({changed})" in refused.stderr and "output_dir=NEW" in refused.stderr
    assert {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")} == before


@pytest.mark.slow
def test_spread_on_a_run_with_steps_per_generation_2_counts_each_group_once(tmp_path: Path) -> None:
    out = tmp_path / "spg2"
    args = ["train", str(RECIPE), *SMOKE, "trainer.max_steps=4", "trainer.steps_per_generation=2", f"output_dir={out}"]
    assert runner.invoke(app, args, catch_exceptions=False).exit_code == 0
    graded = len((out / "grading.jsonl").read_text().splitlines())  # the groups whileai really graded
    result = runner.invoke(app, ["spread", str(out), "--recipe", str(RECIPE), "--json"])
    data = json.loads(result.stdout)
    assert data["groups"] + data["skipped_groups"] == graded  # not twice as many
    assert data["rows"]["duplicate_groups"] == graded and "read twice" in result.stderr


@pytest.mark.slow
def test_a_broken_grader_stops_training_with_exit_4(tmp_path: Path) -> None:
    grader = tmp_path / "grader.py"
    grader.write_text("def broken(group):\n    raise RuntimeError('the judge is down')\n")
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["grader"] = {"kind": "python", "function": f"{grader}:broken"}
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "broken"
    result = runner.invoke(app, ["train", str(path), *SMOKE, f"output_dir={out}"])
    assert result.exit_code == 4, result.stderr
    said = " ".join(result.stderr.split())
    assert f"spread: broken. The grader broken ({grader}, line 2) failed on" in said and "RuntimeError" in said
    gate = json.loads((out / "spread_gate.json").read_text())
    assert gate["verdict"] == "broken" and gate["spread"]["failed_groups"] == {
        "RuntimeError": gate["spread"]["attempted_groups"]
    }
    assert json.loads((out / "whileai_run.json").read_text())["started"] is False


@pytest.mark.slow
def test_a_bad_trainer_section_fails_before_a_model_is_built(tmp_path: Path) -> None:
    out = tmp_path / "bad"
    args = ["train", str(RECIPE), *SMOKE, f"output_dir={out}", "trainer.per_device_train_batch_size=12"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "trainer:" in result.stderr and "divisible" in result.stderr
    assert not (out / "base_model").exists()  # refused by validation, before a run folder exists
    failing = runner.invoke(app, ["train", str(RECIPE), *SMOKE, f"output_dir={out}", "trainer.optim=no_such_optimizer"])
    assert failing.exit_code == 2 and "no_such_optimizer" in failing.stderr
    marked = json.loads((out / "whileai_run.json").read_text())
    assert marked["status"] == "failed" and "no_such_optimizer" in marked["error"]
    resumed = runner.invoke(app, ["train", str(RECIPE), *SMOKE, f"output_dir={tmp_path / 'new'}", "--resume"])
    assert resumed.exit_code == 2 and "no checkpoint-* folder" in resumed.stderr


@pytest.mark.slow
def test_a_judge_run_counts_its_own_calls_and_not_its_gate_s(tmp_path: Path, judge_server) -> None:
    """The gate and the run grade with one judge client; the run's figures count the run's calls only."""
    recipe = yaml.safe_load(RECIPE.read_text())
    judge = {"base_url": judge_server.url, "model": "test-judge", "answer_form": "ranking", "no_cache": True}
    recipe["grader"] = {"kind": "judge", "judge": {**judge, "concurrency": 8, "timeout_s": 20.0}}
    recipe["spread"]["sample"]["prompts"] = 8
    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "run"
    args = ["train", str(path), *SMOKE, "trainer.max_steps=1", "--skip-spread-gate", f"output_dir={out}"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    figures = json.loads((out / "whileai_run.json").read_text())["grader"]
    gate = json.loads((out / "spread_gate.json").read_text())
    assert gate["spread"]["attempted_groups"] > 0, "the gate graded nothing: the test would prove nothing"
    # One call per group the run sent (one display order, no retry): the gate's calls went to the server too.
    assert figures["judge"]["calls"] == figures["grader_calls"] > 0
    assert judge_server.calls > figures["judge"]["calls"]


@pytest.mark.slow
def test_whileai_s_figures_reach_tensorboard(run_dir: Path) -> None:
    """``trainer.report_to: tensorboard``: every step's grader, verifier and watch figures are in the event files
    transformers wrote, under TRL's ``train/`` prefix, with the values TRL logged in ``trainer_state.json``."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {path.parent for path in run_dir.rglob("events.out.tfevents.*")}
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    wanted = {
        "groupwise/groups", "groupwise/mixed", "groupwise/grader_calls", "groupwise/fallbacks",
        "groupwise/hacks_zeroed", "groupwise/grader_seconds", "whileai/pass_rate", "whileai/verifier_failures",
        "whileai/watch/std", "whileai/watch/failed",
    }  # fmt: skip
    assert {f"train/{name}" for name in wanted} <= tags, sorted(tags)
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    logged = [entry["whileai/pass_rate"] for entry in history if "whileai/pass_rate" in entry]
    written = [event.value for event in accumulator.Scalars("train/whileai/pass_rate")]
    assert written == pytest.approx(logged) and len(written) == 2
