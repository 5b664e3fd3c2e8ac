"""The reward function under TRL's evaluation loop, with TRL's own evaluation configurations.

TRL scores evaluation batches with ``num_generations_eval`` completions per prompt, not ``num_generations``: a
reward function that assumed its construction-time group size graded different prompts as one group (eval G = 1)
or crashed the run at its first evaluation (a batch of 4 with eval G = 2 and G = 3). A real ``GRPOTrainer`` on the
tiny model, trained one step with an evaluation after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

import whileai as wai


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from whileai.tasks.load import _echo_digits
    from whileai.training.tiny import build_tiny_model

    task = _echo_digits(8, seed=0)
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", task.corpus, seed=0))


def by_length(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("num_generations", "num_generations_eval", "eval_batch"),
    [(3, 2, 4), (3, 1, 3)],
    ids=["eval-G2-train-G3", "eval-G1"],
)
def test_evaluation_batches_are_graded_in_their_own_groups(
    tiny_model: str, tmp_path: Path, num_generations: int, num_generations_eval: int, eval_batch: int
) -> None:
    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from whileai.tasks.load import _echo_digits, echoes_digits
    from whileai.training.folder import GradingLog

    rows = _echo_digits(8, seed=0).rows
    grading = wai.GroupwiseGrading(grader=by_length)
    log = GradingLog(tmp_path / "grading.jsonl")
    reward = grading.trl_reward(echoes_digits, num_generations, on_graded=log)
    args = GRPOConfig(
        output_dir=str(tmp_path / "run"),
        num_generations=num_generations,
        num_generations_eval=num_generations_eval,
        per_device_train_batch_size=num_generations * 2,
        per_device_eval_batch_size=eval_batch,
        eval_strategy="steps",
        eval_steps=1,
        max_steps=1,
        max_completion_length=8,
        use_cpu=True,
        report_to="none",
        scale_rewards="none",
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
    )
    trainer = GRPOTrainer(
        model=tiny_model,
        reward_funcs=[reward],
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        eval_dataset=datasets.Dataset.from_list(rows[:4]),
        processing_class=AutoTokenizer.from_pretrained(tiny_model),
    )
    trainer.train()
    groups = [json.loads(line) for line in (tmp_path / "grading.jsonl").read_text().splitlines()]
    evaluated = [g for g in groups if g["phase"] == "eval"]
    trained = [g for g in groups if g["phase"] == "train"]
    assert trained and all(len(g["rewards"]) == num_generations for g in trained)
    assert evaluated and all(len(g["rewards"]) == num_generations_eval for g in evaluated)
    assert any("eval_whileai/pass_rate" in entry for entry in trainer.state.log_history)
    if num_generations_eval == 1:
        assert not any(g["graded"] for g in evaluated)  # a group of one has nothing to tell apart
