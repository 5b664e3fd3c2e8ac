"""The command line through Typer's runner: every command, every exit code, messages on stderr, JSON on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import child_processes
import pytest
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "recipes" / "refund_rows.jsonl"
RECIPE = REPO / "recipes" / "refund_scripted.yaml"
PAGE = (
    "spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75\n"
    "spread: yes. The grader tells these passes apart.\n"
)
# What `whileai spread` adds under the page's two lines: the controls of the shipped rule on the page's rows.
CONTROLS = (
    "controls: agreement under reordering tau 1.00 (n=2 groups, at least 0.50 needed); identical passes tied in "
    "2 of 2 controls (at most 10% may differ); injection held in 2 of 2 (1 of 1 text, 1 of 1 JSON-shaped); "
    "surface copies scored higher: padding 0 of 1, formatting 0 of 1, claim untried (at most 10% may, or half as "
    "many as scored lower)\n"
)

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tied_rows(groups: int = 3) -> list[dict]:
    return [
        {"scenario_id": f"s{g}", "reward": 1, "final_text": "<tool_call>a</tool_call> done"}
        for g in range(groups)
        for _ in range(3)
    ]


def test_version_and_help_list_exit_codes() -> None:
    assert invoke("--version").stdout.strip().startswith("whileai ")
    helped = invoke("--help")
    assert helped.exit_code == 0 and "Exit codes: 0 ok; 1 the spread gate found no spread" in helped.stdout
    for command in ("spread", "redistribute", "simulate", "validate", "train", "report"):
        assert command in helped.stdout


def test_spread_reproduces_the_page_verdict_with_the_recipe() -> None:
    """The page's two lines, byte for byte, then the controls: the shipped rule reads content (tau 1) and ties
    identical passes."""
    result = invoke("spread", ROWS, "--recipe", RECIPE)
    assert result.exit_code == 0
    assert result.stdout == PAGE + CONTROLS


def test_spread_reads_rows_from_the_recipe() -> None:
    result = invoke("spread", "--recipe", RECIPE)
    assert result.exit_code == 0 and result.stdout == PAGE + CONTROLS


def test_spread_with_a_python_grader_file(tmp_path: Path) -> None:
    grader = tmp_path / "grader.py"
    grader.write_text(
        "def rank(group):\n"
        "    passes = [g for g in group if g['passed']]\n"
        "    ranked = sorted(passes, key=lambda g: g['completion'].count('<tool_call>'))\n"
        "    hacks = [g['index'] for g in passes if 'ORD-9999' in g['completion']]\n"
        "    return {'ranking': [g['index'] for g in ranked if g['index'] not in hacks], 'hacks': hacks}\n"
    )
    # The page's grader breaks ties by position (a stable sort): the identical-passes control catches it.
    result = invoke("spread", ROWS, "--grader", f"{grader}:rank")
    assert result.exit_code == 1 and result.stdout.startswith(PAGE.splitlines()[0])
    assert (
        "identical passes got different scores in 2 of 2 controls" in result.stdout and "Return a tie" in result.stdout
    )
    # The same rule returning ties for equal counts passes, and prints the page's verdict.
    grader.write_text(
        "def rank(group):\n"
        "    passes = [g for g in group if g['passed']]\n"
        "    hacks = [g['index'] for g in passes if 'ORD-9999' in g['completion']]\n"
        "    counts = sorted({g['completion'].count('<tool_call>') for g in passes if g['index'] not in hacks})\n"
        "    ranking = [[g['index'] for g in passes if g['index'] not in hacks\n"
        "                and g['completion'].count('<tool_call>') == c] for c in counts]\n"
        "    return {'ranking': ranking, 'hacks': hacks}\n"
    )
    result = invoke("spread", ROWS, "--grader", f"{grader}:rank")
    assert result.exit_code == 0 and result.stdout == PAGE + CONTROLS


def test_no_spread_exits_1_with_the_verdict(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "tied.jsonl", tied_rows())
    result = invoke("spread", rows, "--recipe", RECIPE)
    assert result.exit_code == 1
    assert "spread: no." in result.stdout and "multi-turn" in result.stdout


def test_too_few_scores_exits_1(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "few.jsonl", [{"scenario_id": "a", "reward": 1, "final_text": "x"}])
    result = invoke("spread", rows, "--recipe", RECIPE)
    assert result.exit_code == 1 and "too few scores" in result.stdout


def test_spread_json_parses_back() -> None:
    result = invoke("spread", ROWS, "--recipe", RECIPE, "--json")
    data = json.loads(result.stdout)
    assert data["verdict"] == "yes" and data["scores"] == 4
    assert data["rows"] == {"read": 6, "skipped": 0, "files": 1, "left_out_files": [], "duplicate_groups": 0}
    assert data["grader"]["groups"] == 2 and data["hacks"] == {"refund-22": [2]}


def test_spread_verbose_prints_a_table_per_group() -> None:
    result = invoke("spread", ROWS, "--recipe", RECIPE, "--verbose")
    assert "refund-17" in result.stdout and "hack (zeroed)" in result.stdout and result.stdout.endswith(PAGE + CONTROLS)


def test_bad_row_names_file_line_and_field(tmp_path: Path) -> None:
    rows = [*tied_rows(1), {"scenario_id": "x", "final_text": "y"}]
    path = write_rows(tmp_path / "bad.jsonl", rows)
    result = invoke("spread", path, "--recipe", RECIPE)
    assert result.exit_code == 2
    assert f"{path} line 4: missing field 'reward'" in result.stderr
    assert "Traceback" not in result.stderr


def test_skip_bad_rows_reports_how_many(tmp_path: Path) -> None:
    text = ROWS.read_text() + "{not json\n" + json.dumps({"scenario_id": "z", "reward": "high", "final_text": ""})
    path = tmp_path / "rows.jsonl"
    path.write_text(text + "\n")
    result = invoke("spread", path, "--recipe", RECIPE, "--skip-bad-rows")
    assert result.exit_code == 0 and result.stdout == PAGE + CONTROLS
    assert "skipped 2 bad row(s) of 8" in result.stderr


def test_custom_field_names(tmp_path: Path) -> None:
    rows = [
        {"task": r["scenario_id"], "score": r["reward"], "text": r["final_text"]}
        for r in map(json.loads, ROWS.read_text().splitlines())
    ]
    path = write_rows(tmp_path / "renamed.jsonl", rows)
    args = ("--group-key", "task", "--reward-key", "score", "--text-key", "text")
    result = invoke("spread", path, "--recipe", RECIPE, *args)
    assert result.exit_code == 0 and result.stdout == PAGE + CONTROLS


def test_json_rows_and_folders(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    (tmp_path / "one.json").write_text(json.dumps(rows))
    assert invoke("spread", tmp_path / "one.json", "--recipe", RECIPE).stdout == PAGE + CONTROLS
    folder = tmp_path / "folder"
    folder.mkdir()
    write_rows(folder / "a.jsonl", rows[:3])
    write_rows(folder / "b.jsonl", rows[3:])
    assert invoke("spread", folder, "--recipe", RECIPE).stdout == PAGE + CONTROLS


def test_parquet_rows_and_trl_completion_logs(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    pd.DataFrame(rows).to_parquet(tmp_path / "rows.parquet")
    assert invoke("spread", tmp_path / "rows.parquet", "--recipe", RECIPE).stdout == PAGE + CONTROLS
    # A TRL log_completions file: step, prompt, completion, reward columns, advantage; groups are prompts.
    trl = pd.DataFrame(
        {
            "step": [1] * 6,
            "prompt": [r["scenario_id"] for r in rows],
            "completion": [r["final_text"] for r in rows],
            "groupwise_advantage": [0.0] * 6,
            "whileai_reward": [float(r["reward"]) for r in rows],
            "advantage": [0.0] * 6,
        }
    )
    completions = tmp_path / "run" / "completions"
    completions.mkdir(parents=True)
    trl.to_parquet(completions / "completions_00001.parquet")
    result = invoke("spread", completions, "--recipe", RECIPE)
    assert result.exit_code == 0 and result.stdout == PAGE + CONTROLS


def test_missing_rows_file_and_missing_grader_section(tmp_path: Path) -> None:
    result = invoke("spread", tmp_path / "nope.jsonl", "--recipe", RECIPE)
    assert result.exit_code == 2 and "no such file or folder" in result.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("grading: {mode: advantage}\n")
    result = invoke("spread", "--recipe", empty)
    assert result.exit_code == 2 and f"{empty}: this recipe has no grader section" in result.stderr


def test_unreachable_grader_exits_4(tmp_path: Path) -> None:
    grader = tmp_path / "down.py"
    grader.write_text(
        "from whileai.errors import GraderUnavailable\n"
        "def rank(group):\n    raise GraderUnavailable('http://127.0.0.1:9/v1: connection refused')\n"
    )
    result = invoke("spread", ROWS, "--grader", f"{grader}:rank")
    assert result.exit_code == 4 and "connection refused" in result.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--debug", "spread", str(tmp_path / "nope.jsonl")])
    assert result.exit_code != 0 and result.exception is not None


# ---------------------------------------------------------------- redistribute


def test_redistribute_table_and_json() -> None:
    result = invoke("redistribute", "--rewards", "1,1,0,0", "--factors", "0=1.0,1=0.5")
    assert result.exit_code == 0
    assert "+0.6667" in result.stdout and "+0.3333" in result.stdout and "lambda 1.3333" in result.stdout
    data = json.loads(invoke("redistribute", "--rewards", "1,1,0,0", "--factors", "0=1.0,1=0.5", "--json").stdout)
    assert data["advantages"] == [0.6666666666666666, 0.3333333333333333, -0.5, -0.5]


def test_redistribute_ranking_with_ties_and_hacks() -> None:
    data = json.loads(
        invoke("redistribute", "--rewards", "1,1,1,1,0", "--ranking", "3,0=1", "--hacks", "2", "--json").stdout
    )
    assert data["factors"] == {"3": 1.0, "0": 0.625, "1": 0.625} and data["hacks"] == [2]
    assert sum(data["advantages"]) == pytest.approx(0.0)
    same = json.loads(
        invoke("redistribute", "--rewards", "1,1,1,1,0", "--ranking", "[3,[0,1]]", "--hacks", "2", "--json").stdout
    )
    assert same["advantages"] == data["advantages"]


def test_redistribute_shows_a_after_hacks_are_zeroed_and_caps_honestly() -> None:
    data = json.loads(
        invoke("redistribute", "--rewards", "1,1,1,0", "--ranking", "1,0", "--hacks", "2", "--json").stdout
    )
    assert data["effective_rewards"] == [1.0, 1.0, 0.0, 0.0] and data["advantages_before"] == [0.5, 0.5, -0.5, -0.5]
    assert data["advantages"][2:] == [-0.5, -0.5]  # failures keep their advantage: the cap did not bind
    table = invoke("redistribute", "--rewards", "1,0", "--factors", "0=1.0", "--cap", "1").stdout
    assert "lambda 1.0000" in table and "(capped)" not in table


def test_an_unforeseen_error_is_one_line_and_exit_2(monkeypatch) -> None:
    import whileai.cli.redistribute as command

    def explode(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(command, "_grade", explode)
    result = invoke("redistribute", "--rewards", "1,0")
    assert result.exit_code == 2 and "KeyError" in result.stderr and "--debug" in result.stderr


def test_partial_credit_never_moves_the_best_ranked_pass_down() -> None:
    # [1, 0.2, 0, 0]: the 0.2 pass sits below the mean (A = -0.1); ranked best, it must not lose, and the 0.7 pass,
    # ranked worst, must not gain.
    data = json.loads(invoke("redistribute", "--rewards", "1,0.2,0,0", "--ranking", "1,0", "--json").stdout)
    assert data["advantages"] == pytest.approx([0.7, -0.1, -0.3, -0.3])
    assert data["advantages"] == pytest.approx(data["advantages_before"])
    table = invoke("redistribute", "--rewards", "1,0.2,0,0", "--ranking", "1,0").stdout
    assert "not moved" in table


def test_redistribute_cap_and_fallback() -> None:
    data = json.loads(
        invoke("redistribute", "--rewards", "1,0,0,0", "--factors", "0=0.1", "--cap", "2", "--json").stdout
    )
    assert data["lambda"] == 2.0
    # the calculator's bad input is exit 2 naming the option and the member, never a quiet fallback
    result = invoke("redistribute", "--rewards", "1,1,0", "--ranking", "0,2")
    assert result.exit_code == 2 and "--ranking: ranked index 2 is a failure" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ranking", "5,0"], "--ranking: ranked index 5 is not a member of the group of 4"),
        (["--factors", "0=2.0"], "--factors: factor 2.0 for pass 0 is outside (0, 1]"),
        (["--factors", "7=0.5"], "--factors: factor given for 7, which is not a pass"),
        (["--hacks", "9"], "--hacks: hack 9 is not a member of the group of 4"),
    ],
)
def test_redistribute_names_the_member_a_bad_option_gets_wrong(args, message) -> None:
    result = invoke("redistribute", "--rewards", "1,1,0,0", *args)
    assert result.exit_code == 2 and message in result.stderr and "fell back" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rewards", "1,x"], "comma-separated numbers"),
        (["--rewards", "1,0", "--factors", "0:1"], "index=factor"),
        (["--rewards", "1,0", "--factors", "0=1", "--ranking", "0"], "not both"),
        ([], "give --rewards"),
        (["--rewards", "1,nan,0"], "finite"),
        (["--rewards", "1,0", "--cap", "0.5"], "--cap: Input should be greater than or equal to 1 (got 0.5)"),
        (["--rewards", "1,0", "--min-factor", "2"], "--min-factor: Input should be less than or equal to 1 (got 2.0)"),
    ],
)
def test_redistribute_bad_input_exits_2(args, message) -> None:
    result = invoke("redistribute", *args)
    assert result.exit_code == 2 and message in result.stderr


def test_redistribute_batch_mode(tmp_path: Path) -> None:
    source = write_rows(
        tmp_path / "groups.jsonl",
        [
            {"id": "a", "rewards": [1, 1, 0, 0], "factors": {"0": 1.0, "1": 0.5}},
            {"id": "b", "rewards": [1, 1, 1, 0], "ranking": [1, 0], "hacks": [2]},
            {"id": "c", "rewards": [1, 0], "factors": {"1": 0.5}},
        ],
    )
    target = tmp_path / "out.jsonl"
    result = invoke("redistribute", "--in", source, "--out", target)
    assert result.exit_code == 0 and "wrote 3 group(s)" in result.stderr and "1 fell back" in result.stderr
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines[0]["advantages"] == [0.6666666666666666, 0.3333333333333333, -0.5, -0.5]
    assert lines[1]["id"] == "b" and lines[2]["fell_back"] is True
    bad = write_rows(tmp_path / "bad.jsonl", [{"rewards": [1, 0]}, {"reward": [1]}])
    result = invoke("redistribute", "--in", bad)
    assert result.exit_code == 2 and f"{bad} line 2: missing field 'rewards'" in result.stderr


# ---------------------------------------------------------------- validate, train, simulate, report


def test_validate_ok_print_and_overrides() -> None:
    result = invoke("validate", RECIPE, "grading.cap=2", "--print")
    assert result.exit_code == 0 and "cap: 2.0" in result.stdout and "is valid" in result.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grading.capp=2", "grading.capp: unknown key; did you mean 'cap'?"),
        ("grading.mode=both", "grading.mode: Input should be 'advantage' or 'reward'"),
        (
            "trainer.learning_rat=1e-5",
            "'learning_rat' is not a field of TRL's GRPOConfig; did you mean 'learning_rate'?",
        ),
        ("trainer.scale_rewards=group", "set trainer.scale_rewards: none"),
        ("grader.rule.order=up", "grader.rule.order: Input should be 'ascending' or 'descending'"),
        ("nokey", "not key=value"),
    ],
)
def test_validate_names_the_bad_yaml_path(override, message) -> None:
    result = invoke("validate", RECIPE, override)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_validate_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    assert "no such recipe file" in invoke("validate", tmp_path / "x.yaml").stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("grader:\n  kind: scripted\n   rule: 1\n")
    result = invoke("validate", broken)
    assert result.exit_code == 2 and "line 3" in result.stderr and "not valid YAML" in result.stderr


def test_train_needs_model_data_and_verifier() -> None:
    result = invoke("train", RECIPE, "--dry-run")
    assert result.exit_code == 2 and "needs the recipe section(s) model, data, verifier" in result.stderr


def test_simulate_then_spread(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    result = invoke("simulate", "--scenarios", "builtin:refunds", "--num-scenarios", "20", "--n", "8", "--out", rows)
    assert result.exit_code == 0 and result.stdout.startswith("pass@1 ")
    assert len(rows.read_text().splitlines()) == 160
    spread = invoke("spread", rows, "--recipe", RECIPE)
    assert spread.exit_code == 0 and "spread: yes." in spread.stdout
    again = tmp_path / "again.jsonl"
    invoke("simulate", "--scenarios", "builtin:refunds", "--num-scenarios", "20", "--n", "8", "--out", again)
    assert again.read_bytes() == rows.read_bytes()
    assert invoke("simulate", "--scenarios", "builtin:nope", "--out", again).exit_code == 2


def test_report_reads_a_spread_report_and_a_trl_run(tmp_path: Path) -> None:
    report = tmp_path / "spread.json"
    report.write_text(invoke("spread", ROWS, "--recipe", RECIPE, "--json").stdout)
    run = tmp_path / "run" / "checkpoint-2"
    run.mkdir(parents=True)
    history = [
        {"step": 1, "reward": 0.4, "reward_std": 0.3, "frac_reward_zero_std": 0.5, "completions/mean_length": 30.0},
        {
            "step": 2,
            "reward": 0.6,
            "reward_std": 0.2,
            "frac_reward_zero_std": 0.25,
            "completions/mean_length": 28.0,
            "groupwise/fallbacks": 0.0,
        },
        {"step": 2, "train_runtime": 10.0},
    ]
    (run / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    result = runner.invoke(app, ["report", str(report), str(tmp_path / "run"), "--steps"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "verdict" in result.stdout and "zero-std share" in result.stdout
    # no completion logs: no pass rate to give, and the summary says so instead of inventing one
    assert "pass rate            no completion logs" in result.stdout
    data = json.loads(invoke("report", report, tmp_path / "run", "--json").stdout)
    assert [r["kind"] for r in data["reports"]] == ["spread", "run"] and len(data["reports"][1]["steps"]) == 2
    assert invoke("report", tmp_path).exit_code == 2


def test_train_dry_run_prints_the_plan_without_torch() -> None:
    import sys

    recipe = REPO / "recipes" / "tiny_cpu_gar.yaml"
    code = (
        "import sys\n"
        "from whileai.cli.main import app\n"
        f"app(['train', {str(recipe)!r}, 'trainer.max_steps=5', '--dry-run'], standalone_mode=False)\n"
        "print('HEAVY', [m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules])\n"
    )
    done = child_processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout
    assert "spread gate" in done.stdout and "max_steps=5" in done.stdout and "scale_rewards='none'" in done.stdout


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        ("{scale_rewards: group}", "trainer.scale_rewards is 'group'"),
        ("{scale_rewards: batch}", "trainer.scale_rewards is 'batch'"),
        ("{scale_rewards: true}", "trainer.scale_rewards is 'group'"),
        ("{multi_objective_aggregation: normalize_then_sum}", "normalize_then_sum"),
        ("{reward_weights: [2.0]}", "trainer.reward_weights is [2.0]"),
        ("{reward_weights: [1.0, 1.0]}", "trainer.reward_weights is [1.0, 1.0]"),
    ],
)
@pytest.mark.parametrize("mode", ["advantage", "reward"])
def test_a_grader_arm_refuses_what_would_take_it_off_equation_3(tmp_path: Path, trainer, message, mode) -> None:
    """Each of these moves TRL's advantages off equation 3; declaring comparison_arm is no way around it."""
    recipe = tmp_path / "r.yaml"
    for arm in ("", "comparison_arm: gar\n"):
        recipe.write_text(f"{arm}grader: {{kind: scripted}}\ngrading: {{mode: {mode}}}\ntrainer: {trainer}\n")
        result = invoke("validate", recipe)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
    # a binary arm (no grader) may scale as it likes, and its plan says what it trains on
    recipe.write_text(f"comparison_arm: binary\ntrainer: {trainer}\n")
    assert invoke("validate", recipe).exit_code == 0
    assert invoke("validate", REPO / "recipes" / "tiny_cpu_gar.yaml", "trainer.scale_rewards=group").exit_code == 2


def test_the_gate_source_is_validated_and_planned(tmp_path: Path) -> None:
    twin = REPO / "recipes" / "tiny_cpu_agent_gar.yaml"
    refused = invoke("validate", twin, "spread.sample.prompts=4")
    assert refused.exit_code == 2 and "spread.sample generates single-turn completions" in refused.stderr
    plan = invoke("train", REPO / "recipes" / "tiny_cpu_gar.yaml", "--dry-run")
    assert plan.exit_code == 0
    assert "the initial model's completions: 8 for each of 32 training prompts" in " ".join(
        plan.stdout.replace("│", " ").split()
    )
    rows_first = invoke("train", REPO / "recipes" / "tiny_cpu_gar.yaml", f"spread.rows={ROWS}", "--dry-run")
    assert "refund_rows.jsonl" in rows_first.stdout and "initial model's completions" not in rows_first.stdout


def test_report_shows_fallbacks_by_kind_and_the_judges_figures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.5}]}))
    groups = [
        {"step": 1, "rewards": [1, 0], "passed": [True, False], "graded": True, "reason": None, "scores": []},
        {
            "step": 1,
            "rewards": [1, 0],
            "passed": [True, False],
            "graded": False,
            "reason": "grader raised: JudgeCallError: HTTP 429 after 4 tries",
            "failure": "http 429",
        },
    ]
    (run / "grading.jsonl").write_text("".join(json.dumps(g) + "\n" for g in groups))
    judge = {"calls": 9, "retries": 4, "cache_hits": 2, "tokens_in": 900, "tokens_out": 90}
    judge.update(latency_p50_s=0.2, latency_p95_s=0.9, failures={"http 429": 1})
    grader = {"fallbacks": {"http 429": 1}, "first_failures": {"http 429": groups[1]["reason"]}, "judge": judge}
    (run / "whileai_run.json").write_text(json.dumps({"grader": grader}))
    result = runner.invoke(app, ["report", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    for text in ("fell back: http 429", "first http 429", "judge calls (retries)", "9 (4)", "judge cache hits"):
        assert text in result.stdout, text
    assert "0.200 s / 0.900 s" in result.stdout and "judge failed: http 429" in result.stdout


def test_a_served_agent_is_refused_only_where_train_would_gate_on_it(tmp_path: Path) -> None:
    gar, binary = REPO / "recipes" / "refund_agent_gar.yaml", REPO / "recipes" / "tiny_cpu_agent_binary.yaml"
    refused = invoke("validate", gar, "simulate.agent=model")
    assert refused.exit_code == 2 and "simulate.agent: model" in refused.stderr, refused.stderr
    assert invoke("train", gar, "simulate.agent=model", "--dry-run").exit_code == 2
    assert invoke("validate", binary, "simulate.agent=model").exit_code == 0  # a binary arm has no gate
    # whileai simulate takes the same recipe and asks for the served agent's endpoint
    served = invoke("simulate", "--recipe", gar, "simulate.agent=model", "--out", tmp_path / "rows.jsonl")
    assert served.exit_code == 2 and "--agent model needs --base-url" in served.stderr, served.stderr
