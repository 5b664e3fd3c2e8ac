"""``whileai eval RUN``: a trained run's model on prompts it did not train on, through the command line.

Two real 2-step runs of the offline recipes (the GAR arm and the binary arm); each is evaluated on 8 prompts past
the 8 it trained on. Checked: the pass rate is the one the verifier gives the sampled completions (recomputed here
from the sampled groups), with the report's clustered interval; the grader's figures for the grader arm and none
for the binary arm; eval.json in the run folder; ``whileai report`` shows both runs' held-out figures; a checkpoint
instead of the final model; the errors a new user meets (no run, no model); a multi-turn run through TRL's own
tool loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
SMOKE = ["trainer.max_steps=2", "trainer.save_steps=1", "trainer.logging_steps=1", "data.num_prompts=8"]
runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("held_out")
    made = {}
    for arm in ("gar", "binary"):
        out = root / arm
        done = invoke("train", REPO / "recipes" / f"tiny_cpu_{arm}.yaml", *SMOKE, f"output_dir={out}")
        assert done.exit_code == 0, done.stderr[-3000:]
        made[arm] = out
    return made


def test_eval_measures_the_final_model_on_prompts_past_the_training_ones(runs) -> None:
    result = invoke("eval", runs["gar"], "--prompts", "8", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == json.loads((runs["gar"] / "eval.json").read_text())
    assert data["model"] == "final" and data["prompts"] == 8 and data["generations"] == 8
    assert data["source"] == "the 8 prompt(s) after the 8 it trained on"
    rate = data["pass_rate"]
    assert rate["n"] == 64 and rate["groups"] == 8 and rate["low"] <= rate["rate"] <= rate["high"]
    grader = data["grader"]
    assert grader["verdict"] in ("yes", "no", "too few") and grader["fallbacks"] == 0


def test_the_pass_rate_is_what_the_verifier_gives_the_sampled_completions(runs, monkeypatch) -> None:
    from whileai.stats import clustered_interval
    from whileai.training import sample

    sampled: list = []
    original = sample.sample_groups

    def keep(*args, **kwargs):
        groups = original(*args, **kwargs)
        sampled.extend(groups)
        return groups

    monkeypatch.setattr(sample, "sample_groups", keep)
    result = invoke("eval", runs["binary"], "--prompts", "8", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    counted = [(sum(r > 0 for r, _, _ in members), len(members)) for _, members in sampled]
    assert len(sampled) == 8 and data["pass_rate"] == clustered_interval(counted).as_dict()
    assert data["grader"] is None  # a binary arm has none
    assert "grader: none (a binary arm)" in invoke("eval", runs["binary"], "--prompts", "8").stdout


def test_report_shows_each_run_s_held_out_figures(runs) -> None:
    for run in runs.values():
        if not (run / "eval.json").is_file():
            assert invoke("eval", run, "--prompts", "8").exit_code == 0
    shown = invoke("report", runs["binary"], runs["gar"])
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.count("(whileai eval)") == 2  # each run's row; the paired difference follows
    data = json.loads(invoke("report", runs["gar"], "--json").stdout)
    assert data["reports"][0]["held_out"]["pass_rate"]["n"] == 64


def test_a_checkpoint_instead_of_the_final_model(runs) -> None:
    result = invoke("eval", runs["gar"], "--checkpoint", "checkpoint-1", "--prompts", "4", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"] == "checkpoint-1"
    assert (runs["gar"] / "eval-checkpoint-1.json").is_file()


def test_the_initial_model_on_the_same_prompts(runs) -> None:
    trained = json.loads(invoke("eval", runs["gar"], "--prompts", "4", "--json").stdout)
    result = invoke("eval", runs["gar"], "--initial", "--prompts", "4", "--json")
    assert result.exit_code == 0, result.stderr
    initial = json.loads(result.stdout)
    assert initial["model"] == "initial" and (runs["gar"] / "eval-initial.json").is_file()
    assert [p["prompt"] for p in initial["per_prompt"]] == [p["prompt"] for p in trained["per_prompt"]]
    both = invoke("eval", runs["gar"], "--initial", "--checkpoint", "checkpoint-1")
    assert both.exit_code == 2 and "leave out --checkpoint" in both.stderr
    shown = invoke("report", runs["gar"])  # the initial model's figures sit beside the trained one's
    rate = initial["pass_rate"]
    line = f"initial held-out {rate['rate']:.2f} ({rate['low']:.2f} to {rate['high']:.2f}), n={rate['n']}"
    assert line in " ".join(shown.stdout.split()), shown.stdout
    assert "held-out note a tiny random-weight model knows only the text it trained on" in " ".join(
        shown.stdout.split()
    )


def test_an_eval_the_run_trained_past_is_marked_stale(runs, tmp_path) -> None:
    """eval.json records the step its model had; a run trained on after it (a resume with more steps) shows the
    held-out figures as of that step, with the command that measures them again."""
    import shutil

    run = tmp_path / "gar"
    shutil.copytree(runs["gar"], run)
    assert invoke("eval", run, "--prompts", "2").exit_code == 0
    assert json.loads((run / "eval.json").read_text())["trained_steps"] == 2
    assert "held-out is stale" not in invoke("report", run).stdout
    more = [*SMOKE[1:], "trainer.max_steps=3", f"output_dir={run}", "--resume"]
    trained = invoke("train", REPO / "recipes" / "tiny_cpu_gar.yaml", *more)
    assert trained.exit_code == 0, trained.stderr[-3000:]
    held_out = json.loads(invoke("report", run, "--json").stdout)["reports"][0]["held_out"]
    assert held_out["stale"] is True and (held_out["trained_steps"], held_out["run_steps"]) == (2, 3)
    shown = " ".join(invoke("report", run).stdout.split())
    assert "held-out is stale measured at step 2; the run has trained to step 3 since: whileai eval" in shown


def test_initial_samples_the_model_the_run_started_from(runs, monkeypatch) -> None:
    import whileai.training.sample as sample

    sampled: list[str] = []
    real = sample.sample_groups
    monkeypatch.setattr(sample, "sample_groups", lambda model, *a, **k: sampled.append(model) or real(model, *a, **k))
    assert invoke("eval", runs["gar"], "--initial", "--prompts", "2").exit_code == 0
    assert [Path(model).resolve() for model in sampled] == [(runs["gar"] / "base_model").resolve()]


def test_what_a_new_user_gets_wrong_is_named(runs, tmp_path) -> None:
    nothing = invoke("eval", tmp_path)
    assert nothing.exit_code == 2 and "no recipe.yaml: not a run folder whileai train wrote" in nothing.stderr
    missing = invoke("eval", runs["gar"], "--checkpoint", "checkpoint-99")
    assert missing.exit_code == 2 and "checkpoint-99: no saved model" in missing.stderr


def test_a_multi_turn_run_is_evaluated_through_trl_s_tool_loop(tmp_path: Path, monkeypatch) -> None:
    """The agent task's completions come from TRL's evaluation loop, its tools run by the task's environment. On the
    prompts it trained on (a 2-step run warm-started on them passes some), the verifier must see passes: the loop,
    the environments and the verifier are wired as in training. On held-out prompts it is measured as any run."""
    from whileai.training import held_out

    out = tmp_path / "agent"
    done = invoke("train", REPO / "recipes" / "tiny_cpu_agent_gar.yaml", *SMOKE, f"output_dir={out}")
    assert done.exit_code == 0, done.stderr[-3000:]
    original = held_out._held_out_rows

    def trained_on(setup, prompts, say):
        from whileai.tasks.load import load_task

        original(setup, prompts, say)
        task = load_task(setup)
        return task.rows[:prompts], "the prompts it trained on", task

    monkeypatch.setattr(held_out, "_held_out_rows", trained_on)
    result = invoke("eval", out, "--prompts", "4", "--json")
    assert result.exit_code == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert data["pass_rate"]["n"] == 32 and data["pass_rate"]["passes"] > 0, data
    assert 0 < data["mean_length_tokens"] < 64 and data["grader"] is not None
    assert (
        sorted(row["prompt"] for row in data["per_prompt"]) == sorted(f"support-{n}" for n in range(4))
        or len({row["prompt"] for row in data["per_prompt"]}) == 4
    )  # each scenario its own task, by its id


def test_report_pairs_two_runs_held_out_pass_rates_by_prompt(runs) -> None:
    for run in runs.values():
        assert invoke("eval", run, "--prompts", "8").exit_code == 0
    data = json.loads(invoke("report", runs["binary"], runs["gar"], "--json").stdout)
    evals = [json.loads((runs[arm] / "eval.json").read_text()) for arm in ("binary", "gar")]
    rates = [{row["prompt"]: row["passes"] / row["n"] for row in e["per_prompt"]} for e in evals]
    shared = sorted(set(rates[0]) & set(rates[1]))
    expected = sum(rates[1][p] - rates[0][p] for p in shared) / len(shared)
    comparison = data["held_out_comparison"]
    assert comparison["paired"] and comparison["tasks"] == len(shared) == 8
    assert abs(comparison["difference"] - expected) < 1e-12
    shown = invoke("report", runs["binary"], runs["gar"]).stdout
    assert "held-out pass rate, gar minus binary, whileai eval, the same prompts" in shown
