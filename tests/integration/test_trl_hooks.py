"""What whileai relies on of TRL's and transformers' private parts, one test per hook, against the pinned versions.

``whileai.integrations.trl_trainer.GroupwiseGRPOTrainer`` overrides ``GRPOTrainer.log`` (reading TRL's ``_logs``) and
transformers' ``Trainer._issue_warnings_after_load``; ``whileai.grading.trl.trl_phase`` reads the phase from the
trainer that TRL's ``log_metric`` is bound to. Each test uses the real trainer on a tiny model and fails if TRL or
transformers renames or changes the part the hook stands on.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")
pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict], Path]:
    from whileai.tasks.load import _echo_digits
    from whileai.training.tiny import build_tiny_model

    task = _echo_digits(8, seed=0)
    root = tmp_path_factory.mktemp("hooks")
    return str(build_tiny_model(root / "model", task.corpus, seed=0)), task.rows, root


def _trainer(tiny, reward, said: list[str] | None = None, **settings):
    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from whileai.integrations.trl_trainer import GroupwiseGRPOTrainer

    path, rows, root = tiny
    args = GRPOConfig(
        output_dir=str(root / "out"), num_generations=2, per_device_train_batch_size=2, use_cpu=True,
        report_to="none", scale_rewards="none", max_completion_length=4, disable_tqdm=True, **settings,
    )  # fmt: skip
    return GroupwiseGRPOTrainer(
        model=path,
        reward_funcs=[reward],
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(path),
        say=None if said is None else said.append,
    )


def _zero(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.mark.slow
def test_the_log_hook_keeps_tools_without_arguments_writable(tiny) -> None:
    """TRL's ``log`` writes ``self._logs["completion"]`` to Parquet; tool calls that all take no arguments make a
    struct pandas cannot store unless the hook turned them into JSON strings first."""
    trainer = _trainer(tiny, _zero, log_completions=True)
    (Path(trainer.args.output_dir) / "completions").mkdir(parents=True, exist_ok=True)
    call = {"type": "function", "function": {"name": "list_orders", "arguments": {}}}
    completion = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    logs = trainer._logs
    logs["prompt"].append([{"role": "user", "content": "my orders?"}])
    logs["completion"].append(completion)
    logs["rewards"]["_zero"].append(0.0)
    logs["advantages"].append(0.0)
    trainer.log({"loss": 0.0})
    (written,) = (Path(trainer.args.output_dir) / "completions").glob("completions_*.parquet")
    read = pd.read_parquet(written)
    assert read["completion"][0][0]["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.slow
def test_the_load_hook_ties_a_checkpoint_s_tied_weights_and_says_so_once(tiny) -> None:
    """transformers calls ``_issue_warnings_after_load(load_result)`` after loading a checkpoint; the model names its
    tied weights in ``all_tied_weights_keys``."""
    from transformers import Trainer

    source = inspect.getsource(Trainer)
    assert source.count("self._issue_warnings_after_load(load_result)") >= 2  # the checkpoint-loading paths
    said: list[str] = []
    trainer = _trainer(tiny, _zero, said)
    tied = trainer.model.all_tied_weights_keys
    assert dict(tied) == {"lm_head.weight": "model.embed_tokens.weight"}
    trainer._issue_warnings_after_load(SimpleNamespace(missing_keys=["lm_head.weight"], unexpected_keys=[]))
    assert said == [
        "whileai: the checkpoint does not store lm_head.weight (tied to model.embed_tokens.weight): tied again on "
        "loading, as saved"
    ]
    assert trainer.model.lm_head.weight is trainer.model.model.embed_tokens.weight


@pytest.mark.slow
def test_the_phase_is_read_from_the_trainer_log_metric_is_bound_to(tiny) -> None:
    """TRL hands each reward function ``log_metric``, bound to the trainer, whose ``model.training`` says the phase
    and whose ``num_generations_eval`` the evaluation's group size."""
    from whileai.grading.trl import trl_phase

    seen: list[tuple[str, int]] = []

    def reward(completions, **kwargs):
        seen.append(trl_phase(kwargs, default_size=99))
        return [0.0] * len(completions)

    trainer = _trainer(tiny, reward, num_generations_eval=1)
    inputs = [{"prompt": "12", "completion": "12"}] * 2
    trainer.model.train()  # as Trainer.train puts it
    trainer._calculate_rewards(inputs, ["12", "12"], ["12", "12"], [[1], [1]])
    trainer.model.eval()
    trainer._calculate_rewards(inputs, ["12", "12"], ["12", "12"], [[1], [1]])
    assert seen == [("train", 2), ("eval", 1)]


@pytest.mark.slow
def test_the_sampler_hook_draws_trl_s_orders_and_repeats_them_from_any_epoch(tiny) -> None:
    """TRL's ``_get_train_sampler`` builds a ``RepeatSampler`` with a generator seeded once; the hook's
    ``set_epoch(n)`` gives the order TRL's sampler gives at its (n + 1)-th pass, whether or not it ran the n before
    (a resumed run has not)."""
    from trl.trainer.utils import RepeatSampler

    from whileai.integrations.trl_trainer import EpochRepeatSampler

    sampler = _trainer(tiny, _zero)._get_train_sampler()
    assert type(sampler) is EpochRepeatSampler
    fields = ("data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed")
    plain = RepeatSampler(**{name: getattr(sampler, name) for name in fields})
    trl_orders = [list(plain) for _ in range(4)]  # one generator through four epochs
    assert len({tuple(order) for order in trl_orders}) > 1  # the epochs' orders differ
    for epoch in (2, 0, 3, 1):  # any epoch first: what a resume does
        sampler.set_epoch(epoch)
        assert list(sampler) == trl_orders[epoch]
