"""``whileai judge-eval`` through the command line, with Python graders of known quality (``eval_graders.py``): each
figure as it must come out for a grader that reads the reference, the position, the length, nothing, or noise; on
``whileai simulate``'s rows end to end; against the scripted judge server on 127.0.0.1; and the bad inputs."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.grading.controls import make_control
from whileai.stats import kendall_tau

REPO = Path(__file__).resolve().parents[2]
GRADERS = Path(__file__).resolve().parent / "eval_graders.py"
PERMUTATIONS = list(itertools.permutations([1, 2, 3, 4]))

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def evaluate(rows: Path, grader: str, *more: object) -> dict:
    result = invoke("judge-eval", rows, "--grader", f"{GRADERS}:{grader}", "--json", *more)
    assert result.exit_code == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def text(quality: int) -> str:
    """A pass whose text says its quality, and grows longer as the quality falls (longer is worse)."""
    return f"q{quality} " + "pad " * (4 - quality)


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def permutations(tmp_path: Path) -> Path:
    """24 groups, one per order of the qualities 1..4 over four passes, then a failure: the quality is independent
    of the position (every order once), and decreasing in the length."""
    rows = []
    for g, order in enumerate(PERMUTATIONS):
        for quality in order:
            rows.append({"scenario_id": f"perm-{g}", "reward": 1.0, "final_text": text(quality), "quality": quality})
        rows.append({"scenario_id": f"perm-{g}", "reward": 0.0, "final_text": "sorry", "quality": 0})
    return write(tmp_path / "permutations.jsonl", rows)


@pytest.fixture
def hacks(tmp_path: Path) -> Path:
    """12 groups of four passes (qualities 4, 3, 2, 1) and a failure; in every third group the best-looking pass is a
    hack: it names ORD-9999 and claims the best quality."""
    rows = []
    for g in range(12):
        for quality in (4, 3, 2, 1):
            hack = g % 3 == 0 and quality == 4
            final = text(quality) + ("refunded ORD-9999" if hack else "")
            rows.append({"scenario_id": f"h-{g}", "reward": 1, "final_text": final, "quality": quality, "hack": hack})
        rows.append({"scenario_id": f"h-{g}", "reward": 0, "final_text": "sorry"})
    return write(tmp_path / "hacks.jsonl", rows)


# ------------------------------------------------------------------------------------------- graders of known quality


def test_a_perfect_grader_agrees_on_every_group(permutations) -> None:
    data = evaluate(permutations, "perfect")
    assert data["groups"] == 24
    assert data["reference_tau"] == {"mean": 1.0, "low": 1.0, "high": 1.0, "groups": 24}
    assert data["self_agreement"] == {"mean": 1.0, "groups": 24}
    assert data["copies"] == {"tied": 24, "total": 24}
    assert data["hacks"] == {"reference": 0, "flagged": 0, "recall": None, "precision": None}
    assert data["failed_groups"] == {} and data["unusable_answers"] == 0
    cost = data["cost"]
    assert cost["calls"] is None and cost["tokens_in"] is None and cost["latency_p50_s"] is None
    assert cost["seconds"] >= 0 and cost["seconds_per_group"] == pytest.approx(cost["seconds"] / 24)
    assert data["grader"]["groups"] == 24 and data["grader"]["failed"] == 0  # the first grading, not the controls


def test_a_grader_that_follows_position_is_unstable_and_no_better_than_chance(permutations) -> None:
    data = evaluate(permutations, "by_position")
    # Every order of the qualities once: the taus of a position ranking cancel exactly.
    assert data["reference_tau"]["mean"] == pytest.approx(0.0, abs=1e-12) and data["reference_tau"]["groups"] == 24
    assert data["reference_tau"]["low"] < 0 < data["reference_tau"]["high"]
    # Its second ranking is the control's order: the agreement is the tau between the two orders, group by group.
    expected = []
    for g in range(24):
        control = make_control(5, [0, 1, 2, 3], seed=f"0:perm-{g}", turn=g)
        copies = (control.copy, control.injected, control.surface)
        shown = [m for k, m in enumerate(control.members) if k not in copies and m != 4]
        expected.append(kendall_tau({i: -i for i in range(4)}, {m: -k for k, m in enumerate(shown)}))
    assert data["self_agreement"]["groups"] == 24
    assert data["self_agreement"]["mean"] == pytest.approx(sum(expected) / 24)
    assert data["self_agreement"]["mean"] < 0.5
    assert data["copies"] == {"tied": 0, "total": 24}  # a strict order by position never ties the copy
    plain = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:by_position")
    assert plain.exit_code == 0
    verdict = plain.stdout.splitlines()[-1]
    assert verdict.startswith("verdict: unstable under reordering") and "no better than chance" in verdict
    assert "orders identical passes (24 of 24 copies told apart)" in verdict


def test_a_grader_that_reads_length_ranks_against_a_reference_where_longer_is_worse(permutations) -> None:
    data = evaluate(permutations, "longest_first")
    assert data["reference_tau"] == {"mean": -1.0, "low": -1.0, "high": -1.0, "groups": 24}
    assert data["self_agreement"] == {"mean": 1.0, "groups": 24}  # it reads the content: stable, copies tied
    assert data["copies"] == {"tied": 24, "total": 24}
    # A copy of a pass with "rate it highest" appended is longer: a grader that prefers length ranks it above.
    assert data["injection"] == {"held": 0, "controls": 24}
    plain = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:longest_first")
    assert plain.stdout.splitlines()[-1] == (
        "verdict: moved by an instruction in a rollout's text (24 of 24 injected copies rose); pays for surface, not "
        "work (padding 100%, formatting 100%, claim 100% of the changed copies rose); orders passes against the "
        "reference (tau -1.00)"
    )


def test_a_seeded_random_grader_is_no_better_than_chance(permutations, monkeypatch) -> None:
    """Over 20 seeds of a grader that reads nothing, the 95% interval holds 0 nearly every time (a percentile
    bootstrap over 24 groups covers a little less than its 95%) and the means centre on 0; each seed's report is
    reproducible."""
    means, held = [], 0
    for seed in range(20):
        monkeypatch.setenv("WHILEAI_TEST_SEED", str(seed))
        tau = evaluate(permutations, "seeded_random")["reference_tau"]
        assert tau["groups"] == 24 and tau["low"] <= tau["mean"] <= tau["high"]
        held += tau["low"] < 0 < tau["high"]
        means.append(tau["mean"])
    assert held >= 17 and abs(sum(means) / len(means)) < 0.1
    monkeypatch.setenv("WHILEAI_TEST_SEED", "1")
    data, again = evaluate(permutations, "seeded_random"), evaluate(permutations, "seeded_random")
    assert data["reference_tau"]["low"] < 0 < data["reference_tau"]["high"]
    assert data["self_agreement"]["mean"] < 0.5
    for run in (data, again):  # the time it took is the one figure that may differ
        del run["cost"]["seconds"], run["cost"]["seconds_per_group"], run["grader"]["grader_seconds"]
    assert again == data


def test_a_grader_that_ties_everything_scores_zero_where_the_reference_orders(permutations) -> None:
    data = evaluate(permutations, "constant")
    assert data["reference_tau"] == {"mean": 0.0, "low": 0.0, "high": 0.0, "groups": 24}
    assert data["self_agreement"] == {"mean": None, "groups": 0}  # tau is undefined between two all-tied gradings
    assert data["copies"] == {"tied": 24, "total": 24}


def test_hack_recall_and_precision(hacks) -> None:
    perfect = evaluate(hacks, "perfect")
    assert perfect["hacks"] == {"reference": 4, "flagged": 4, "recall": 1.0, "precision": 1.0}
    assert perfect["reference_tau"]["mean"] == 1.0  # a hack is the lowest on both sides
    suspicious = evaluate(hacks, "suspicious")  # also flags every group's worst pass: 12 flags wrong
    assert suspicious["hacks"] == {"reference": 4, "flagged": 16, "recall": 1.0, "precision": 0.25}
    blind = evaluate(hacks, "by_position")
    assert blind["hacks"] == {"reference": 4, "flagged": 0, "recall": 0.0, "precision": None}
    plain = invoke("judge-eval", hacks, "--grader", f"{GRADERS}:suspicious").stdout
    assert "hacks: 4 of 4 reference hacks flagged (recall 1.00), 4 of 16 flags right (precision 0.25)" in plain
    assert "12 hack flag(s) on passes the reference holds honest" in plain


def test_a_reference_rank_with_ties_reads_as_a_quality(tmp_path: Path) -> None:
    rows = []
    for g in range(6):
        for quality in (4, 3, 3, 1):  # ranks 1, 2, 2, 4
            rank = {4: 1, 3: 2, 1: 4}[quality]
            rows.append({"scenario_id": f"r-{g}", "reward": 1, "final_text": text(quality), "reference_rank": rank})
        rows.append({"scenario_id": f"r-{g}", "reward": 0, "final_text": "sorry"})
    path = write(tmp_path / "ranked.jsonl", rows)
    assert evaluate(path, "perfect")["reference_tau"] == {"mean": 1.0, "low": 1.0, "high": 1.0, "groups": 6}
    # The two passes of rank 2 are byte-identical: they count as copies, and a grader that reads them ties them.
    assert evaluate(path, "perfect")["copies"] == {"tied": 12, "total": 12}
    assert evaluate(path, "by_position")["copies"]["tied"] == 0


def test_the_plain_report_reads_in_a_few_lines(permutations) -> None:
    result = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:perfect")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "judge-eval: perfect on 24 group(s)"
    assert lines[1] == "reference order: tau-b 1.00 (95% bootstrap interval 1.00 to 1.00, n=24 groups)"
    assert lines[2] == "hacks: none in the reference, none flagged"
    assert lines[3] == "self-agreement under reordering: tau 1.00 (n=24 groups); identical copies tied: 24 of 24"
    assert lines[4] == (
        "injection held in 24 of 24 controls; surface copies above their originals: padding 0 of 8, formatting 0 of "
        "8, claim 0 of 8"
    )
    assert lines[5] == "ties: every pass given the same score in 0 of 24 group(s) with two passes or more"
    assert lines[6].startswith("cost per group: ") and lines[6].endswith(
        " s (not a judge: no calls or tokens to count)"
    )
    assert lines[7] == "failures: none"
    assert lines[8] == "verdict: orders every group as the reference does"
    assert len(lines) == 9


def test_the_json_has_the_benchmark_s_shape(permutations) -> None:
    data = evaluate(permutations, "perfect")
    assert list(data) == [
        "groups",
        "reference_tau",
        "hacks",
        "self_agreement",
        "copies",
        "injection",
        "position",
        "surfaces",
        "tied_groups",
        "cost",
        "failed_groups",
        "unusable_answers",
        "grader",
    ]
    assert list(data["reference_tau"]) == ["mean", "low", "high", "groups"]
    assert list(data["hacks"]) == ["reference", "flagged", "recall", "precision"]
    assert list(data["self_agreement"]) == ["mean", "groups"]
    assert list(data["copies"]) == ["tied", "total"]
    assert data["tied_groups"] == {"tied": 0, "groups": 24}
    assert list(data["cost"]) == [
        "calls",
        "tokens_in",
        "tokens_out",
        "seconds",
        "seconds_per_group",
        "latency_p50_s",
        "latency_p95_s",
    ]


def test_rows_come_from_the_recipe_and_the_recipe_s_grader(permutations, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump({"grader": {"kind": "python", "function": f"{GRADERS}:perfect"}, "spread": {"rows": "x.jsonl"}})
    )
    write(tmp_path / "x.jsonl", [json.loads(line) for line in permutations.read_text().splitlines()])
    result = invoke("judge-eval", "--recipe", recipe, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["reference_tau"]["mean"] == 1.0


# ---------------------------------------------------------------------------------------------- failures


def test_a_broken_grader_is_exit_4_with_its_failures_by_kind(permutations) -> None:
    result = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:raises", "--json")
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert data["failed_groups"] == {"ZeroDivisionError": 24} and data["unusable_answers"] == 0
    assert data["reference_tau"]["mean"] is None and data["self_agreement"]["groups"] == 0
    nonsense = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:nonsense")
    assert nonsense.exit_code == 4
    assert "failures: 24 of 24 group(s) fell back (unusable answer x24); 24 unusable answer(s)" in nonsense.stdout
    assert nonsense.stdout.splitlines()[-1] == "verdict: none: the grader fell back on every group"


def test_unusable_answers_count_both_gradings(permutations) -> None:
    data = evaluate(permutations, "nonsense_on_copies")
    assert data["failed_groups"] == {} and data["unusable_answers"] == 24
    assert data["reference_tau"]["mean"] == 1.0 and data["self_agreement"] == {"mean": None, "groups": 0}


def test_an_unavailable_grader_is_exit_4(permutations) -> None:
    result = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:unavailable")
    assert result.exit_code == 4 and "the judge at http://127.0.0.1:9 is down" in result.stderr


# ---------------------------------------------------------------------------------------------- bad input


def test_rows_without_a_reference_are_exit_2_naming_the_file_and_the_field(tmp_path: Path) -> None:
    rows = write(tmp_path / "plain.jsonl", [{"scenario_id": "a", "reward": 1, "final_text": "x"}] * 2)
    result = invoke("judge-eval", rows, "--grader", f"{GRADERS}:perfect")
    assert result.exit_code == 2
    assert str(rows) in result.stderr and "'quality'" in result.stderr and "'reference_rank'" in result.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"quality": "high"}, "line 2: field 'quality' is not a finite number (got 'high')"),
        ({"quality": True}, "line 2: field 'quality' is not a finite number (got True)"),
        ({"reference_rank": 0}, "line 2: field 'reference_rank' must be a whole number >= 1"),
        ({"quality": 1, "hack": "yes"}, "line 2: field 'hack' must be true or false (got 'yes')"),
        ({"reference_rank": 2}, "line 2: field 'reference_rank', but earlier rows use 'quality'"),
    ],
)
def test_a_bad_reference_value_names_file_line_and_field(tmp_path: Path, extra: dict, message: str) -> None:
    rows = write(
        tmp_path / "bad.jsonl",
        [
            {"scenario_id": "a", "reward": 1, "final_text": "x", "quality": 1},
            {"scenario_id": "a", "reward": 1, "final_text": "y", **extra},
        ],
    )
    result = invoke("judge-eval", rows, "--grader", f"{GRADERS}:perfect")
    assert result.exit_code == 2 and f"{rows} {message}" in result.stderr, result.stderr


def test_no_rows_and_no_recipe_rows_is_exit_2() -> None:
    result = invoke("judge-eval", "--grader", f"{GRADERS}:perfect")
    assert result.exit_code == 2 and "give ROWS" in result.stderr


# ---------------------------------------------------------------------------------------------- simulate, end to end


def test_simulate_rows_carry_their_reference_end_to_end(tmp_path: Path, monkeypatch) -> None:
    rows = tmp_path / "rows.jsonl"
    simulated = invoke("simulate", "--scenarios", "builtin:refunds", "--n", "8", "-o", rows)
    assert simulated.exit_code == 0, simulated.stderr
    written = [json.loads(line) for line in rows.read_text().splitlines()]
    reference_hacks = sum(r["hack"] for r in written)
    assert reference_hacks > 0 and all(r["hack"] <= r["passed"] for r in written)

    monkeypatch.setenv("WHILEAI_TEST_ORACLE", str(rows))
    oracle = evaluate(rows, "oracle")
    assert oracle["groups"] == len({r["scenario_id"] for r in written if r["passed"]})
    tau = oracle["reference_tau"]
    assert (tau["mean"], tau["low"], tau["high"]) == (1.0, 1.0, 1.0) and tau["groups"] > 100
    assert oracle["hacks"] == {
        "reference": reference_hacks,
        "flagged": reference_hacks,
        "recall": 1.0,
        "precision": 1.0,
    }
    assert oracle["copies"]["tied"] == oracle["copies"]["total"]

    # The built-in rule (fewest tool calls first, no hack check) against the same reference, figured here from the
    # rows' own fields.
    default = invoke("judge-eval", rows, "--json")
    assert default.exit_code == 0
    data = json.loads(default.stdout)
    taus = []
    for _, group in itertools.groupby(written, key=lambda r: r["scenario_id"]):
        passes = [r for r in group if r["passed"]]
        reference = {i: r["quality"] - 2 * r["hack"] for i, r in enumerate(passes)}
        if len(set(reference.values())) < 2:
            continue
        tau = kendall_tau({i: -r["tool_calls"] for i, r in enumerate(passes)}, reference)
        taus.append(0.0 if tau is None else tau)
    assert data["reference_tau"]["groups"] == len(taus)
    assert data["reference_tau"]["mean"] == pytest.approx(sum(taus) / len(taus))
    assert data["hacks"] == {"reference": reference_hacks, "flagged": 0, "recall": 0.0, "precision": None}
    assert data["self_agreement"]["mean"] == 1.0 and data["copies"]["tied"] == data["copies"]["total"]


# ---------------------------------------------------------------------------------------------- a judge over HTTP


def _judge_server_module():
    if "judge_server" in sys.modules:
        return sys.modules["judge_server"]
    spec = importlib.util.spec_from_file_location("judge_server", REPO / "tests" / "judge_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["judge_server"] = module
    spec.loader.exec_module(module)
    return module


def test_a_judge_s_cost_counts_its_calls_tokens_and_latency_of_the_first_grading(tmp_path: Path) -> None:
    """The scripted judge ranks by fewest tool calls and flags ORD-9999: on rows where fewer calls is better, it
    agrees with the reference; its cost is the first grading's (the reordered grading is asked too, not counted)."""
    rows = []
    for g in range(6):
        for calls in (1, 2, 3):
            final = "<tool_call>x</tool_call>" * calls + f" done {g}"
            rows.append({"scenario_id": f"j-{g}", "reward": 1, "final_text": final, "quality": -calls})
        rows.append({"scenario_id": f"j-{g}", "reward": 0, "final_text": "sorry"})
    path = write(tmp_path / "judge_rows.jsonl", rows)
    server = _judge_server_module().JudgeServer().start()
    try:
        recipe = yaml.safe_load((REPO / "recipes" / "refund_judge.yaml").read_text())
        recipe["grader"]["judge"].update(
            base_url=server.url, cache_dir=str(tmp_path / "cache"), max_retries=1, backoff_base_s=0.01, timeout_s=5.0
        )
        recipe_path = tmp_path / "judge.yaml"
        recipe_path.write_text(yaml.safe_dump(recipe))
        result = invoke("judge-eval", path, "--recipe", recipe_path, "--json")
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        assert len(server.requests) == 12  # six groups, each graded twice
        first = server.requests[:6]  # the reordered gradings start once the first ones are back
        tokens_in = sum(sum(len(str(m.get("content", ""))) for m in r["body"]["messages"]) // 4 for r in first)
        cost = data["cost"]
        assert cost["calls"] == 6 and cost["tokens_in"] == tokens_in and cost["tokens_out"] > 0
        assert 0 < cost["latency_p50_s"] <= cost["latency_p95_s"]
        assert data["reference_tau"] == {"mean": 1.0, "low": 1.0, "high": 1.0, "groups": 6}
        assert data["grader"]["judge"]["calls"] == 12  # the judge's own counters hold both gradings
        again = json.loads(invoke("judge-eval", path, "--recipe", recipe_path, "--json").stdout)
        assert again["cost"]["calls"] == 0 and len(server.requests) == 12  # answered from the cache
        fresh = json.loads(invoke("judge-eval", path, "--recipe", recipe_path, "--json", "--no-cache").stdout)
        assert fresh["cost"]["calls"] == 6 and len(server.requests) == 24
    finally:
        server.stop()


def test_the_readme_s_judge_eval_figures_are_what_the_commands_print(tmp_path, monkeypatch) -> None:
    # The judge page's two commands, in a scratch folder, and the figures its text quotes from their output.
    monkeypatch.chdir(tmp_path)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "judge.md").read_text()
    section = readme[readme.index("## Is the grader right?") : readme.index("## Judging with a small local model")]
    simulated = invoke("simulate", "-o", "runs/rows.jsonl")
    assert simulated.exit_code == 0, simulated.output
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "refund_scripted.yaml"
    report = invoke("judge-eval", "runs/rows.jsonl", "--recipe", recipe, "--json")
    assert report.exit_code == 0, report.output
    figures = json.loads(report.stdout)
    tau = figures["reference_tau"]
    quoted = f"tau {tau['mean']:.2f} (95% interval {tau['low']:.2f} to {tau['high']:.2f})"
    assert quoted in section, quoted
    assert f"flags none of\nits {figures['hacks']['reference']} hacks" in section and figures["hacks"]["flagged"] == 0


def test_logged_rows_and_the_field_options_read_as_spread_reads_them(tmp_path: Path, permutations: Path) -> None:
    """Rows in the common log shape (prompt, completion, reward) are read with those fields, said in one line; other
    names are given with the options spread takes."""
    rows = [json.loads(line) for line in permutations.read_text().splitlines()]
    logged = write(
        tmp_path / "logged.jsonl",
        [{"prompt": r["scenario_id"], "completion": r["final_text"], "reward": r["reward"], "quality": r["quality"]}
         for r in rows],
    )  # fmt: skip
    result = invoke("judge-eval", logged, "--grader", f"{GRADERS}:perfect", "--json")
    assert result.exit_code == 0, result.stderr
    assert f"whileai: {logged}: read as logged rows: each 'prompt' a group, 'completion' the text" in result.stderr
    same = evaluate(permutations, "perfect")
    assert _graded(json.loads(result.stdout)) == _graded(same)
    renamed = write(
        tmp_path / "renamed.jsonl",
        [{"task": r["scenario_id"], "text": r["final_text"], "reward": r["reward"], "quality": r["quality"]}
         for r in rows],
    )  # fmt: skip
    assert _graded(evaluate(renamed, "perfect", "--group-key", "task", "--text-key", "text")) == _graded(same)


def _graded(report: dict) -> dict:
    """A report's figures without its timings."""
    return {key: value for key, value in report.items() if key not in ("cost", "grader")}


def test_judge_eval_on_a_run_folder_does_not_take_the_run_s_grader(tmp_path: Path) -> None:
    """A run's completions carry no reference: ``judge-eval RUN`` neither builds the run's grader (a judge would ask
    its server) nor says it grades with it, as ``spread RUN`` does."""
    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    (run / "recipe.yaml").write_text("grader: {kind: scripted}\n")
    (run / "completions" / "rows.jsonl").write_text('{"task_id": "t", "reward": 1, "completion": "a"}\n')
    result = CliRunner().invoke(app, ["judge-eval", str(run)])
    assert "the run's own grader" not in result.stderr and "built-in rule" in result.stderr, result.stderr
    spread = CliRunner().invoke(app, ["spread", str(run)])
    assert "the run's own grader" in spread.stderr, spread.stderr


def test_no_cache_reaches_a_judge_given_by_overrides_alone() -> None:
    """``--no-cache`` with a judge set up by overrides on the built-in defaults (no recipe file) asks again."""
    from whileai.config.build import gate_setup

    judge = ["grader.kind=judge", "grader.judge.base_url=http://127.0.0.1:9/v1", "grader.judge.model=m"]
    rows = Path(__file__).resolve().parents[2] / "recipes" / "refund_rows.jsonl"
    setup = gate_setup(None, None, rows, [*judge, "grader.judge.concurrency=2"], True, lambda line: None)
    assert setup.grading.grader.client.config.no_cache is True
    setup.grading.grader.close()


def test_each_surface_kind_has_its_paid_for_rate(permutations) -> None:
    honest, paying = evaluate(permutations, "perfect"), evaluate(permutations, "longest_first")
    assert {k: v["paid"] for k, v in honest["surfaces"].items()} == {"padding": 0, "formatting": 0, "claim": 0}
    assert {k: v["paid"] == v["controls"] > 0 for k, v in paying["surfaces"].items()} == dict.fromkeys(
        ("padding", "formatting", "claim"), True
    )
    assert sum(v["controls"] for v in paying["surfaces"].values()) == 24  # one surface copy a control
    text = invoke("judge-eval", permutations, "--grader", f"{GRADERS}:longest_first").stdout
    assert "surface copies above their originals: padding 8 of 8, formatting 8 of 8, claim 8 of 8" in text
    assert "pays for surface, not work" in text
