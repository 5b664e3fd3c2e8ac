"""The reference page's Python path with TRL's real ``GRPOTrainer``: a user's own trainer around ``trl_reward`` is
refused before its first step when it would move the advantages off equation 3, and ``GroupwiseGRPOTrainer`` builds
one that trains on it in one call.

Every trainer here is TRL 1.16's own, on a tiny random-weight model built from a config (no download).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict], Path]:
    from whileai.tasks.load import _echo_digits
    from whileai.training.tiny import build_tiny_model

    task = _echo_digits(4, seed=0)
    root = tmp_path_factory.mktemp("python_trainer")
    return str(build_tiny_model(root / "model", task.corpus, seed=0)), task.rows, root


def _fewest_words(group: list[dict]) -> dict:
    """A grader of one group: the passes ranked by how few words they spend (ties by index)."""
    passes = sorted((g for g in group if g["passed"]), key=lambda g: (len(g["completion"].split()), g["index"]))
    return {"ranking": [g["index"] for g in passes]}


def _config(root: Path, name: str, **settings):
    from trl import GRPOConfig

    fields = {
        "output_dir": str(root / name), "num_generations": 4, "per_device_train_batch_size": 4, "max_steps": 1,
        "max_completion_length": 8, "use_cpu": True, "report_to": "none", "disable_tqdm": True, "save_strategy": "no",
        "temperature": 1.5, **settings,
    }  # fmt: skip
    return GRPOConfig(**fields)


def _extra_reward(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.mark.parametrize(
    ("settings", "extra", "named"),
    [
        ({}, False, "GRPOConfig.scale_rewards is 'group'"),  # TRL's default
        ({"scale_rewards": "none", "reward_weights": [2.0]}, False, "GRPOConfig.reward_weights is [2.0]"),
        (
            {"scale_rewards": "none", "multi_objective_aggregation": "normalize_then_sum"},
            False,
            "GRPOConfig.multi_objective_aggregation is 'normalize_then_sum'",
        ),
        ({"scale_rewards": "none"}, True, "the trainer has 2 reward functions (groupwise_advantage, _extra_reward)"),
    ],
    ids=["scale_rewards default", "reward_weights", "normalize_then_sum", "a second reward function"],
)
def test_a_plain_grpo_trainer_off_equation_3_is_refused_before_its_first_step(tiny, settings, extra, named) -> None:
    """docs/python.md's ``GRPOTrainer(reward_funcs=[gar.trl_reward(verifier, num_generations=4)], ...)``, built by the
    user with TRL's own class: the reward function's first call refuses, naming the setting and the GRPOConfig fix,
    and no optimizer step is taken."""
    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    import whileai as wai
    from whileai.errors import BadInput
    from whileai.tasks.load import echoes_digits

    path, rows, root = tiny
    gar = wai.GroupwiseGrading(grader=_fewest_words)
    reward = gar.trl_reward(echoes_digits, num_generations=4)
    trainer = GRPOTrainer(
        model=path,
        reward_funcs=[reward, _extra_reward] if extra else [reward],
        args=_config(root, "plain", **settings),
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(path),
    )
    with pytest.raises(BadInput) as refused:
        trainer.train()
    message = str(refused.value)
    assert message.startswith("this GRPOTrainer would not train on equation 3: ")
    assert named in message
    if extra:  # TRL filled in a weight of 1 for each function: the user never set reward_weights
        assert "reward_weights" not in message
    assert trainer.state.global_step == 0
    assert gar.stats.groups == 0  # refused before any group was graded
    if not extra and "scale_rewards" in named:
        assert message.endswith('set GRPOConfig(scale_rewards="none")')


def test_the_groupwise_trainer_refuses_on_construction(tiny) -> None:
    import datasets

    import whileai as wai
    from whileai.errors import BadInput
    from whileai.tasks.load import echoes_digits

    path, rows, root = tiny
    with pytest.raises(BadInput, match=r"this GroupwiseGRPOTrainer would not train on equation 3: GRPOConfig\."):
        wai.GroupwiseGRPOTrainer(
            model=path,
            grading=wai.GroupwiseGrading(grader=_fewest_words),
            verifier=echoes_digits,
            args=_config(root, "refused", scale_rewards="batch"),
            train_dataset=datasets.Dataset.from_list(rows),
        )
    with pytest.raises(BadInput, match="grading= with verifier="):
        wai.GroupwiseGRPOTrainer(model=path, grading=wai.GroupwiseGrading(grader=_fewest_words))


def test_the_groupwise_trainer_trains_on_equation_3_in_one_call(tiny) -> None:
    """One call builds the trainer; two steps train; TRL's own logged advantage of every group is equation 3 of the
    verifier's rewards and the grader's ranking of that group's completions."""
    import datasets

    import whileai as wai
    from whileai.methods import rank_factors, redistribute
    from whileai.tasks.load import echoes_digits

    path, rows, root = tiny
    gar = wai.GroupwiseGrading(grader=_fewest_words)
    trainer = wai.GroupwiseGRPOTrainer(
        model=path,
        grading=gar,
        verifier=echoes_digits,
        args=_config(
            root,
            "trained",
            scale_rewards="none",
            max_steps=2,
            per_device_train_batch_size=16,
            log_completions=True,
            logging_steps=1,
        ),
        train_dataset=datasets.Dataset.from_list(rows),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    frames = [pd.read_parquet(p) for p in sorted((root / "trained" / "completions").glob("*.parquet"))]
    logged = pd.concat(frames, ignore_index=True)
    assert len(logged) == 2 * 16
    told_apart = 0
    for _, group in logged.groupby("whileai_group", sort=False):
        rewards = group["whileai_reward"].tolist()
        texts = group["completion"].tolist()
        passes = [i for i, r in enumerate(rewards) if r > 0]
        factors = {}
        if passes and len(passes) < len(rewards):
            ranked = sorted(passes, key=lambda i: (len(texts[i].split()), i))
            factors = rank_factors(ranked, passes=passes)
            told_apart += 1
        expected = redistribute(rewards, factors or None)
        assert group["advantage"].tolist() == pytest.approx(expected, abs=1e-6), (rewards, texts)
    assert gar.stats.groups == 8
    assert told_apart == gar.stats.mixed >= 1  # a group whose passes were told apart


def test_the_trainers_own_defaults_leave_std_scaling_off(tiny) -> None:
    """Without ``args`` the trainer takes TRL's defaults but ``scale_rewards="none"``, named after the model as
    ``GRPOTrainer`` names it."""
    import datasets

    import whileai as wai
    from whileai.tasks.load import echoes_digits

    path, rows, _ = tiny
    trainer = wai.GroupwiseGRPOTrainer(
        model=path,
        grading=wai.GroupwiseGrading(grader=_fewest_words),
        verifier=echoes_digits,
        train_dataset=datasets.Dataset.from_list(rows),
    )
    assert trainer.args.scale_rewards == "none"
    assert trainer.args.output_dir.endswith("model-GRPO")
    assert trainer.reward_func_names == ["groupwise_advantage"]


def test_a_groupwise_reward_wrapped_in_the_user_s_own_function_is_still_checked(tiny) -> None:
    """A user who wraps the reward function (to log, to rename it) hides its mark from the trainer's list; the reward
    function still knows what it is and refuses at its first call."""
    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    import whileai as wai
    from whileai.errors import BadInput
    from whileai.tasks.load import echoes_digits

    path, rows, root = tiny
    reward = wai.GroupwiseGrading(grader=_fewest_words).trl_reward(echoes_digits, num_generations=4)

    def my_reward(**kwargs):
        return reward(**kwargs)

    trainer = GRPOTrainer(
        model=path,
        reward_funcs=[my_reward],
        args=_config(root, "wrapped"),  # TRL's default scale_rewards
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(path),
    )
    with pytest.raises(BadInput, match=r"GRPOConfig\.scale_rewards is 'group'"):
        trainer.train()
