"""The verl guard on plain configs: each setting that moves verl's advantages off equation 3, or splits a group
between reward workers, is named with its fix; verl's defaults count as set. (tests/verl runs it on verl's own
config, through verl's reward worker.)"""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any

import pytest

from whileai.grading.guard import config_value, verl_signal_problems


def good(**changes: Any) -> dict[str, Any]:
    """A config verl trains on equation 3 with, changed at dotted keys."""
    config: dict[str, Any] = {
        "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False, "use_kl_in_reward": False},
        "actor_rollout_ref": {"rollout": {"n": 8, "val_kwargs": {"n": 8}}},
        "reward": {"num_workers": 1, "reward_model": {"enable": False}},
        "trainer": {"val_before_train": True, "test_freq": 10},
        "data": {"train_batch_size": 64, "val_batch_size": 32},
    }
    for dotted, value in changes.items():
        node = config
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        if value is _DELETE:
            node.pop(last)
        else:
            node[last] = value
    return config


_DELETE = object()


def named(problems: list[str]) -> list[str]:
    return [p.split(" ", 1)[0] for p in problems]


def test_a_grpo_arm_config_has_no_problem() -> None:
    assert verl_signal_problems(good()) == []


def test_an_empty_config_is_read_as_verl_s_defaults() -> None:
    problems = verl_signal_problems({})
    assert named(problems) == [
        "algorithm.adv_estimator",
        "algorithm.norm_adv_by_std_in_grpo",
        "actor_rollout_ref.rollout.n",
    ]
    assert "verl's default is 'gae'" in problems[0] and "algorithm.adv_estimator=grpo" in problems[0]
    assert "verl's default when unset" in problems[1]


@pytest.mark.parametrize(
    ("changes", "key", "fix"),
    [
        ({"algorithm__adv_estimator": "gae"}, "algorithm.adv_estimator", "algorithm.adv_estimator=grpo"),
        ({"algorithm__adv_estimator": "rloo"}, "algorithm.adv_estimator", "algorithm.adv_estimator=grpo"),
        ({"algorithm__norm_adv_by_std_in_grpo": True}, "algorithm.norm_adv_by_std_in_grpo", "=False"),
        ({"algorithm__norm_adv_by_std_in_grpo": "true"}, "algorithm.norm_adv_by_std_in_grpo", "=False"),
        ({"algorithm__norm_adv_by_std_in_grpo": _DELETE}, "algorithm.norm_adv_by_std_in_grpo", "=False"),
        ({"algorithm__use_kl_in_reward": True}, "algorithm.use_kl_in_reward", "use_kl_loss=True"),
        ({"reward__reward_model__enable": True}, "reward.reward_model.enable", "enable=False"),
        ({"custom_reward_function__path": "verifier.py"}, "custom_reward_function.path", "reward.custom_reward"),
        ({"actor_rollout_ref__rollout__n": 1}, "actor_rollout_ref.rollout.n", "to the group size"),
        ({"actor_rollout_ref__rollout__n": True}, "actor_rollout_ref.rollout.n", "to the group size"),
        ({"algorithm__adv_estimator": "grpo_vectorized"}, "algorithm.adv_estimator", "always divides"),
        ({"data__train_batch_size": 1024}, "reward.num_workers", "reward.num_workers=11 or more"),
        ({"data__train_batch_size": _DELETE}, "reward.num_workers", "reward.num_workers=11 or more"),
        ({"data__gen_batch_size": 256}, "reward.num_workers", "reward.num_workers=3 or more"),
        ({"reward__num_workers": 0}, "reward.num_workers", "reward.num_workers=1 or more"),
        ({"actor_rollout_ref__rollout__val_kwargs__n": 1}, "actor_rollout_ref.rollout.val_kwargs.n", "val_kwargs.n=8"),
    ],
)
def test_each_bad_setting_is_named_with_its_fix(changes: dict[str, Any], key: str, fix: str) -> None:
    problems = verl_signal_problems(good(**changes))
    assert named(problems) == [key]
    assert fix in problems[0]


def test_verl_s_enum_is_read_by_its_value() -> None:
    class AdvantageEstimator(str, enum.Enum):  # verl's is a str enum
        GRPO = "grpo"
        GRPO_VECTORIZED = "grpo_vectorized"

    assert verl_signal_problems(good(algorithm__adv_estimator=AdvantageEstimator.GRPO)) == []
    assert named(verl_signal_problems(good(algorithm__adv_estimator=AdvantageEstimator.GRPO_VECTORIZED))) == [
        "algorithm.adv_estimator"
    ]


def test_more_reward_workers_hold_more_responses() -> None:
    """A step's responses all wait on reward workers: 800 planned per worker (Ray holds 1000 calls of each)."""
    assert verl_signal_problems(good(data__train_batch_size=100)) == []  # 800 on one worker
    assert named(verl_signal_problems(good(data__train_batch_size=101))) == ["reward.num_workers"]
    assert verl_signal_problems(good(data__train_batch_size=1024, reward__num_workers=11)) == []


@pytest.mark.parametrize("value", [False, "False", "false", 0])
def test_a_false_flag_in_any_spelling_is_false(value: Any) -> None:
    assert verl_signal_problems(good(algorithm__norm_adv_by_std_in_grpo=value)) == []


def test_validation_groups_of_another_size_are_fine_when_validation_is_off() -> None:
    off = good(actor_rollout_ref__rollout__val_kwargs__n=1, trainer__val_before_train=False, trainer__test_freq=-1)
    assert verl_signal_problems(off) == []
    before_train_only = good(actor_rollout_ref__rollout__val_kwargs__n=1, trainer__test_freq=-1)
    assert named(verl_signal_problems(before_train_only)) == ["actor_rollout_ref.rollout.val_kwargs.n"]


def test_attribute_configs_are_read_like_mappings() -> None:
    """verl's config dataclasses have attributes, not keys."""
    config = SimpleNamespace(
        algorithm=SimpleNamespace(adv_estimator="grpo", norm_adv_by_std_in_grpo=True),
        actor_rollout_ref={"rollout": {"n": 4, "val_kwargs": {"n": 4}}},
        reward=SimpleNamespace(num_workers=1),
        data=SimpleNamespace(train_batch_size=32, val_batch_size=32),
    )
    assert named(verl_signal_problems(config)) == ["algorithm.norm_adv_by_std_in_grpo"]
    assert config_value(config, "actor_rollout_ref.rollout.n") == 4
    assert config_value(config, "actor_rollout_ref.rollout.missing.deeper", "x") == "x"


def test_a_mapping_whose_get_raises_reads_as_missing() -> None:
    """An OmegaConf interpolation that does not resolve raises on access: the key reads as unset."""

    class Broken(dict):
        def get(self, key: str, default: Any = None) -> Any:
            raise RuntimeError("interpolation to a missing key")

    assert config_value({"trainer": Broken()}, "trainer.default_local_dir", "fallback") == "fallback"


def test_validation_needs_a_batch_size_and_workers_for_it() -> None:
    """verl validates the whole validation set at once unless data.val_batch_size says otherwise."""
    problems = verl_signal_problems(good(data__val_batch_size=_DELETE))
    assert named(problems) == ["data.val_batch_size"] and "turn validation off" in problems[0]
    off = good(data__val_batch_size=_DELETE, trainer__val_before_train=False, trainer__test_freq=-1)
    assert verl_signal_problems(off) == []
    big = verl_signal_problems(good(data__val_batch_size=512))  # 4096 at once on one worker
    assert named(big) == ["reward.num_workers"] and "data.val_batch_size 512 x val_kwargs.n 8" in big[0]
    assert "reward.num_workers=6 or more" in big[0]


def test_an_async_trainer_keeps_more_batches_in_flight() -> None:
    """verl v1's async modes generate num_warmup_batches ahead: their responses wait at the same time."""
    mode = {"trainer_mode": "colocate_async", "colocate_async": {"num_warmup_batches": 1}}
    problems = verl_signal_problems(good(data__train_batch_size=64, trainer__v1=mode))
    assert named(problems) == ["reward.num_workers"] and "x 2 batches in flight (colocate_async)" in problems[0]
    assert verl_signal_problems(good(data__train_batch_size=64, reward__num_workers=2, trainer__v1=mode)) == []
