"""The HTTP judge end to end against a real server on 127.0.0.1: check_spread, trl_reward, reward mode, orders."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from whileai import GroupwiseGrading

PAGE_REPORT = (
    "spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75\n"
    "spread: yes. The grader tells these passes apart."
)


def calls(n: int) -> str:
    return "<tool_call>lookup</tool_call>" * n + " done"


def test_check_spread_through_the_judge_matches_the_page(make_judge, judge_server, judge_tools, page_rows) -> None:
    judge = make_judge("grader")
    gar = GroupwiseGrading(grader=judge)
    report = gar.check_spread(page_rows)
    assert str(report) == PAGE_REPORT
    assert gar.stats.hacks_zeroed == 1 and gar.stats.failed == 0
    # One call per group, each showing every rollout (failures too) under a label with its verdict.
    assert judge_server.calls == 2
    shown = [judge_tools.shown_rollouts(r["body"]) for r in judge_server.requests]
    assert sorted(len(s) for s in shown) == [3, 3]
    assert sorted(sum(not ok for _, ok, _ in s) for s in shown) == [0, 1]
    body = judge_server.requests[0]["body"]
    assert body["model"] == "test-judge"
    assert body["messages"][0]["role"] == "system" and "data" in body["messages"][0]["content"]
    assert body["response_format"]["type"] == "json_schema"
    stats = judge.stats.as_dict()
    assert stats["calls"] == 2 and stats["tokens_in"] > 0 and stats["latency_p50_s"] > 0


def test_trl_reward_is_sync_and_redistributes(make_judge, judge_server) -> None:
    gar = GroupwiseGrading(grader=make_judge("grader"))
    logged: dict[str, float] = {}

    def verifier(prompts, completions, **kwargs):
        return [1.0 if c.endswith("done") else 0.0 for c in completions]

    reward = gar.trl_reward(verifier, num_generations=4)
    prompts = ["refund ORD-1"] * 4 + ["refund ORD-2"] * 4 + ["refund ORD-3"] * 4
    completions = [calls(1), calls(3), "no", "no"] + [calls(1)] * 4 + ["no"] * 4
    out = reward(prompts=prompts, completions=completions, log_metric=lambda k, v: logged.__setitem__(k, v))
    # Mixed group: the pass with fewer tool calls gains what the other loses (page: 1.1667 / 0.8333).
    assert out[:4] == pytest.approx([1.1666666666666665, 0.8333333333333333, 0.0, 0.0])
    assert out[4:8] == [1.0] * 4 and out[8:] == [0.0] * 4  # all-pass and all-fail groups are not sent
    assert judge_server.calls == 1
    assert logged["groupwise/grader_calls"] == 1 and logged["groupwise/fallbacks"] == 0


def test_trl_reward_called_from_a_running_event_loop(make_judge, judge_server) -> None:
    """TRL may call the reward function from a thread whose own asyncio loop is running."""
    gar = GroupwiseGrading(grader=make_judge("grader"))
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0], num_generations=3)

    async def inside_a_loop() -> list[float]:
        return reward(prompts=["p"] * 3, completions=[calls(1), calls(2), "x"])

    results: list[list[float]] = []
    thread = threading.Thread(target=lambda: results.append(asyncio.run(inside_a_loop())))
    thread.start()
    thread.join(30)
    assert results and results[0][0] > results[0][1] > 0
    assert gar.stats.failed == 0


def test_a_batch_of_groups_is_judged_concurrently(make_judge, judge_server, judge_tools) -> None:
    judge_server.delay = 0.3
    gar = GroupwiseGrading(grader=make_judge("grader"))
    groups = 16
    completions = [c for g in range(groups) for c in (calls(1) + f" #{g}", calls(2) + f" #{g}", "no")]
    rewards = [1.0, 1.0, 0.0] * groups
    import time

    start = time.perf_counter()
    shaped = gar.shape(rewards, ["p"] * len(rewards), completions, group_size=3)
    elapsed = time.perf_counter() - start
    assert judge_server.calls == groups
    assert elapsed < 3.0  # 10x one call (0.3 s) on a loaded machine; serial would take 4.8 s
    assert all(shaped[3 * g] > shaped[3 * g + 1] for g in range(groups))


def test_reward_mode_writes_stores_and_reuses_rubrics(make_judge, judge_server, judge_tools, tmp_path) -> None:
    path = tmp_path / "run" / "rubrics.json"
    grs = make_judge("grading", grading={"mode": "reward"}, rubrics_path=path)
    shaped = grs.shape(
        [1, 1, 0],
        ["refund ORD-17"] * 3,
        ["<tool_call>x</tool_call> done", "<tool_call>x</tool_call>" * 3 + " done", "no"],
        group_size=3,
        task_id=["refund-17"] * 3,
    )
    assert shaped == [1.0, 0.5, 0.0]  # the page's reward-mode example, scored over HTTP
    kinds = [judge_tools.request_kind(r["body"]) for r in judge_server.requests]
    assert kinds.count("rubric") == 1 and kinds.count("score") == 2
    stored = json.loads(path.read_text())
    assert stored["rubrics"]["refund-17"]["behavior"] == ["look the order up before refunding"]
    # The score prompt carries the rubric inside its block.
    score_body = next(r["body"] for r in judge_server.requests if judge_tools.request_kind(r["body"]) == "score")
    assert "<rubric>" in score_body["messages"][1]["content"]

    # A new run (no answer cache) loads the stored rubric and asks only for scores.
    judge_server.reset()
    again = make_judge("grading", grading={"mode": "reward"}, rubrics_path=path, no_cache=True)
    again.shape([1, 0], ["refund ORD-17"] * 2, ["<tool_call>x</tool_call> ok", "no"], group_size=2, task_id="refund-17")
    assert [judge_tools.request_kind(r["body"]) for r in judge_server.requests] == ["score"]


def test_two_orders_are_a_shuffle_and_its_reverse_and_agree(make_judge, judge_server, judge_tools, page_rows) -> None:
    judge = make_judge("grader", permutations=2)
    gar = GroupwiseGrading(grader=judge)
    assert str(gar.check_spread(page_rows)) == PAGE_REPORT
    assert judge_server.calls == 4
    by_task: dict[str, list[list[str]]] = {}
    for request in judge_server.requests:
        texts = [text for _, _, text in judge_tools.shown_rollouts(request["body"])]
        by_task.setdefault(min(texts), []).append(texts)
    for first, second in by_task.values():
        assert second == first[::-1]
    stats = judge.stats.as_dict()
    assert stats["agreement_tau"] == 1.0 and stats["agreement_groups"] == 2


def test_a_position_biased_judge_shows_as_disagreement(make_judge, judge_server, judge_tools) -> None:
    """A judge that always ranks the first pass it sees first disagrees with itself across reversed orders."""

    def first_shown_first(body):
        passes = [label for label, ok, _ in judge_tools.shown_rollouts(body) if ok]
        return judge_tools.Reply({"ranking": passes, "hacks": [], "reasons": {}})

    judge_server.push(*[first_shown_first] * 2)
    judge = make_judge("grader", permutations=2)
    group = [
        {"index": 0, "prompt": "p", "completion": "alpha", "reward": 1.0, "passed": True},
        {"index": 1, "prompt": "p", "completion": "beta", "reward": 1.0, "passed": True},
        {"index": 2, "prompt": "p", "completion": "gamma", "reward": 0.0, "passed": False},
    ]
    answer = judge(group)
    assert answer["ranking"] == [[0, 1]]  # mean ranks are equal: a tie, not a bias-driven order
    assert answer["notes"]["agreement"] == -1.0
    assert judge.stats.as_dict()["agreement_tau"] == -1.0


def test_build_judge_resolves_recipe_paths_and_wires_reward_mode(judge_server, tmp_path) -> None:
    from whileai.errors import BadInput
    from whileai.judge import JudgeGrader, JudgeScorer, build_judge

    source = Path(__file__).resolve().parents[2] / "configs" / "judge" / "v2.yaml"
    (tmp_path / "prompts.yaml").write_text(source.read_text().replace("version: v2", "version: local"))
    settings = {"base_url": judge_server.url, "model": "m", "prompts": "prompts.yaml", "cache_dir": "cache"}
    grader = build_judge(settings, "advantage", base_dir=tmp_path)
    try:
        assert isinstance(grader, JudgeGrader) and grader.prompts.version == "local"
        assert grader.config.cache_path() == tmp_path / "cache" / "judge_cache.sqlite"
    finally:
        grader.close()
    scorer = build_judge(settings, "reward", base_dir=tmp_path, rubrics_path=tmp_path / "rubrics.json")
    try:
        assert isinstance(scorer, JudgeScorer) and scorer.rubric_writer is not None
        assert scorer.rubric_writer.client is scorer.client
    finally:
        scorer.close()
    with pytest.raises(BadInput, match=r"grader\.judge\.timeout_s") as caught:
        build_judge({**settings, "timeout_s": "sk-not-a-number-123"}, "advantage")
    assert "sk-not-a-number-123" not in str(caught.value)


@pytest.mark.slow
def test_a_training_run_keeps_the_judges_figures(judge_server, tmp_path) -> None:
    """`whileai train` with a judge grader: calls, retries, cache hits, tokens, latency and failures by kind reach
    whileai_run.json, and `whileai report` shows them."""
    pytest.importorskip("trl")
    import yaml
    from typer.testing import CliRunner

    from whileai.cli.main import app

    recipe = yaml.safe_load((Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu_gar.yaml").read_text())
    recipe["grader"] = {
        "kind": "judge",
        "judge": {"base_url": judge_server.url, "model": "test-judge", "cache_dir": str(tmp_path / "cache")},
    }
    path = tmp_path / "judged.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "run"
    smoke = ["trainer.max_steps=2", "trainer.save_steps=2", "data.num_prompts=8", f"output_dir={out}"]
    runner = CliRunner()
    # The scripted judge ranks by tool calls, which these digits never make: no spread, so the gate is skipped here.
    result = runner.invoke(app, ["train", str(path), *smoke, "--skip-spread-gate"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    figures = json.loads((out / "whileai_run.json").read_text())["grader"]
    judge = figures["judge"]
    assert judge["calls"] >= figures["grader_calls"] > 0 and judge["tokens_in"] > 0
    assert judge["latency_p50_s"] is not None and "cache_hits" in judge and "retries" in judge
    # Each step's share reaches TRL's logs, and so report_to's logger: the steps add up to the run's figures.
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    for key in ("calls", "tokens_in", "tokens_out", "cache_hits"):
        assert sum(entry.get(f"judge/{key}", 0.0) for entry in history) == judge[key], key
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0 and "judge calls" in report.stdout and "judge cache hits" in report.stdout
