"""``GroupwiseGRPOTrainer``: TRL's ``GRPOTrainer`` on a groupwise grader, kept on equation 3, with the hooks
``whileai train`` needs.

Built in Python in one call, ``GroupwiseGRPOTrainer(model=..., grading=gar, verifier=check, args=GRPOConfig(...),
train_dataset=...)`` makes the grader's reward function (``GroupwiseGrading.trl_reward``, its groups gathered across
processes) and refuses, on construction, whatever would move TRL's advantages off equation 3
(``whileai.grading.trl.refuse_off_equation_3``, the rule ``whileai train`` applies). Left without ``args``, it
trains with TRL's defaults but ``scale_rewards="none"``. ``whileai train`` builds the same class with its own reward
function.

Each hook overrides a method that TRL or transformers keep private, so each is named here with why, and
``tests/integration/test_trl_hooks.py`` fails if the pinned TRL (``trl>=1.16,<2``) or transformers renames or
changes what it relies on:

- ``log``: TRL's ``GRPOTrainer.log`` writes ``self._logs["completion"]`` to Parquet with pandas, which infers one
  struct type for the arguments of all the batch's tool calls; a batch whose calls all take no arguments gives a
  struct with no fields, which Parquet cannot store, and the run stops. The hook makes every tool call's arguments
  the JSON string of the OpenAI form first (``json_tool_arguments``).
- ``_issue_warnings_after_load``: transformers' ``Trainer`` calls it after loading a checkpoint's weights. A
  checkpoint does not store a weight tied to another (a tiny model's ``lm_head.weight``), and transformers warns of
  it as a missing key. The hook ties the weights again and says so once, in whileai's words; any other missing key
  keeps transformers' warning.
- ``_get_train_sampler``: TRL's ``RepeatSampler`` draws each epoch's order from one generator seeded once, so a run
  resumed from a checkpoint (whose sampler starts again from the seed) trains on other prompts from the epoch after
  the first on, and seed-paired runs part ways at a resume. The hook returns the same sampler with a ``set_epoch``
  (which transformers calls at each epoch) that puts the generator where an uninterrupted run has it: the orders of
  an uninterrupted run are TRL's own, and a resumed run repeats them.
- ``create_model_card`` (public): TRL names the base model only when it is a hub id, so a run from a local folder
  got a card saying "a fine-tuned version of [None]" and a quick start loading "None"; the card names the folder
  and the run's ``final/`` instead.

:func:`grpo_trainer` builds the class as ``whileai train`` runs it: transformers' console callbacks replaced by
whileai's, a tokenizer that also reads bare JSON tool calls, LoRA adapters through TRL's ``peft_config``.

Importing this module imports trl (and so torch and transformers): ``whileai.GroupwiseGRPOTrainer`` and the training
run import it, after their check that the train extra is installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from whileai.errors import BadInput, needs_extra
from whileai.grading.trl import refuse_off_equation_3

__all__ = ["EpochRepeatSampler", "GroupwiseGRPOTrainer", "grpo_trainer", "json_tool_arguments"]


class GroupwiseGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` on a groupwise grader's reward, checked to train on equation 3.

    Args:
        model: the policy, as ``GRPOTrainer`` takes it (a hub id, a local folder or a model).
        grading: the ``whileai.GroupwiseGrading`` to train with; with ``verifier``, the trainer's one reward function
            is ``grading.trl_reward(verifier, args.num_generations)``, its groups gathered across processes.
        verifier: a TRL-style reward function that says pass (> 0) or fail: ``verifier(prompts, completions,
            **columns) -> list[float]``.
        args: TRL's ``GRPOConfig``; None: TRL's defaults with ``scale_rewards="none"``, an output folder named
            after the model as ``GRPOTrainer`` names it, and the CPU where there is no CUDA.
        reward_funcs: instead of ``grading`` and ``verifier``, the reward functions themselves (``whileai train``
            passes its own); a groupwise one among them is checked the same way.
        say: where the one line about a resumed checkpoint's tied weights goes (None: nowhere).
        recipe: the recipe the trainer is built from, so a refusal names it and words the fix for it (``whileai
            train``); None words it for ``GRPOConfig``.
        **kwargs: every other ``GRPOTrainer`` argument (``train_dataset``, ``processing_class``, ``peft_config``,
            ``environment_factory``, ...).

    Raises:
        BadInput: a trainer that would not train on equation 3 (``scale_rewards`` other than ``"none"``,
            ``reward_weights``, ``normalize_then_sum``, a second reward function: an environment class that defines
            ``get_reward`` is one), or ``grading`` without ``verifier`` or beside ``reward_funcs``.

    Usage (docs/python.md's "Your own trainer" runs one)::

        trainer = GroupwiseGRPOTrainer(
            model="Qwen/Qwen2.5-0.5B-Instruct", grading=whileai.GroupwiseGrading(grader=rank_group),
            verifier=check, args=GRPOConfig(output_dir="runs/mine", scale_rewards="none"), train_dataset=data,
        )
        trainer.train()
    """

    def __init__(
        self,
        model: Any,
        grading: Any = None,
        verifier: Callable[..., Any] | None = None,
        args: GRPOConfig | None = None,
        *,
        reward_funcs: Any = None,
        say: Callable[[str], None] | None = None,
        recipe: str | None = None,
        **kwargs: Any,
    ) -> None:
        if grading is not None:
            if verifier is None or reward_funcs is not None:
                raise BadInput(
                    "GroupwiseGRPOTrainer: pass grading= with verifier= (the trainer makes the reward function), "
                    "or reward_funcs= alone"
                )
            if args is None:
                import torch

                name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "model")
                name = f"{str(name).rstrip('/').split('/')[-1]}-GRPO"
                # TRL's GRPOConfig() alone refuses a machine without CUDA (bf16 on a CPU); said here, it trains there.
                args = GRPOConfig(output_dir=name, scale_rewards="none", use_cpu=not torch.cuda.is_available())
            from whileai.grading.trl import TorchGather

            reward_funcs = [grading.trl_reward(verifier, args.num_generations, gather=TorchGather())]
        self._say = say
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        refuse_off_equation_3(self, recipe=recipe)

    def _get_train_sampler(self, *arguments: Any, **keywords: Any) -> Any:
        # TRL's private sampler, given an epoch so that a resumed run draws an uninterrupted run's orders.
        sampler = super()._get_train_sampler(*arguments, **keywords)
        if isinstance(sampler, RepeatSampler) and sampler.shuffle and sampler.seed is not None:
            sampler.__class__ = EpochRepeatSampler
        return sampler

    def log(self, *arguments: Any, **keywords: Any) -> Any:
        # TRL's private completion buffer, read just before TRL writes it (see the module docstring).
        logs = getattr(self, "_logs", None)
        if self.log_completions and isinstance(logs, dict) and "completion" in logs:
            json_tool_arguments(logs["completion"])
        return super().log(*arguments, **keywords)

    def create_model_card(self, *arguments: Any, **keywords: Any) -> None:
        # TRL names a base model only when it is a hub id; for a local folder (every model whileai builds or
        # converts) its card reads "a fine-tuned version of [None](https://huggingface.co/None)".
        super().create_model_card(*arguments, **keywords)
        card = Path(self.args.output_dir) / "README.md"
        if not self.is_world_process_zero() or not card.is_file():
            return
        text = card.read_text(encoding="utf-8")
        base = str(getattr(self.model.config, "_name_or_path", "") or "")
        named = f"the model in `{base}`" if base else "a model built from a config (random weights)"
        text = text.replace(
            "a fine-tuned version of [None](https://huggingface.co/None)", f"a fine-tuned version of {named}"
        )
        text = text.replace('model="None"', f'model="{Path(self.args.output_dir) / "final"}"')
        card.write_text(text, encoding="utf-8")

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        # transformers' private warning of missing and unexpected keys after a checkpoint's weights are loaded.
        missing = set(getattr(load_result, "missing_keys", None) or ())
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}
        if not missing or not missing <= set(tied) or getattr(load_result, "unexpected_keys", None):
            return super()._issue_warnings_after_load(load_result)
        self.model.tie_weights()
        if self._say is not None:
            names = ", ".join(f"{key} (tied to {tied[key]})" for key in sorted(missing))
            self._say(f"whileai: the checkpoint does not store {names}: tied again on loading, as saved")
        return None


class EpochRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose ``set_epoch(n)`` puts its generator where an uninterrupted run's is at epoch
    ``n``: seeded, then ``n`` orders drawn (``n`` permutations of the dataset: nothing next to a training step)."""

    def set_epoch(self, epoch: int) -> None:
        import torch

        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self.num_samples, generator=self.generator)


def json_tool_arguments(completions: Any) -> None:
    """Turn every dict ``arguments`` of the tool calls in logged conversations into its JSON string, in place.

    TRL writes its completion logs with pandas to Parquet, which infers one struct type for the arguments of all the
    batch's tool calls: a batch whose calls all take no arguments (``list_orders()``) gives a struct with no fields,
    which Parquet cannot store, and the run stops. As JSON strings (the OpenAI form) every batch has one column type,
    no struct merges the fields of different tools, and ``whileai.rows.text.render_messages`` renders them as it
    renders the dicts.
    """
    for messages in completions:
        if not isinstance(messages, list):
            continue
        for message in messages:
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), dict):
                    function["arguments"] = json.dumps(function["arguments"])


def grpo_trainer(
    *,
    model: str,
    reward: Callable[..., list[float]],
    args: Any,
    train_rows: list[dict[str, Any]],
    eval_rows: list[dict[str, Any]],
    processing_class: Any,
    environment_factory: Any,
    callbacks: Sequence[Any],
    where: str,
    say: Callable[[str], None] | None = None,
    tool_calls: str = "template",
    lora: dict[str, Any] | None = None,
) -> Any:
    """TRL's ``GRPOTrainer`` on ``reward`` alone, as ``whileai train`` runs it.

    The trainer is :class:`GroupwiseGRPOTrainer` (its completion logs kept writable to
    Parquet; a resumed checkpoint's tied weights said once through ``say``); transformers' printer and tqdm callbacks
    make way for ``callbacks`` (whileai's own progress). For a grader arm the built trainer is checked as
    ``refuse_off_equation_3`` says, worded for the recipe ``where`` (an environment class that defines
    ``get_reward`` is a second reward function the recipe never names). ``tool_calls="json"`` makes the trainer's
    tokenizer also read a bare JSON tool call (``whileai.integrations.tool_calls``) naming one of the environment's
    tools. ``lora`` (``peft.LoraConfig`` keyword arguments) trains adapters over the frozen model, through TRL's
    ``peft_config``.

    Raises:
        BadInput: a grader arm whose trainer would not train on equation 3 (``where`` names the recipe).
        MissingExtra: ``lora`` without peft installed.
    """
    import datasets
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    peft_config = None
    if lora is not None:
        with needs_extra("train", "model.lora"):
            from peft import LoraConfig
        peft_config = LoraConfig(**lora)
    trainer = GroupwiseGRPOTrainer(
        model=model,
        peft_config=peft_config,
        reward_funcs=[reward],
        args=args,
        train_dataset=datasets.Dataset.from_list(train_rows),
        eval_dataset=datasets.Dataset.from_list(eval_rows) if eval_rows else None,
        processing_class=processing_class,
        environment_factory=environment_factory,
        callbacks=list(callbacks),
        say=say,
        recipe=where,
    )
    if tool_calls == "json" and environment_factory is not None:
        from whileai.integrations.tool_calls import accept_json_tool_calls, environment_tools

        names = [tool.__name__ for tool in environment_tools(environment_factory())]
        accept_json_tool_calls(trainer._tokenizer, names)  # the tokenizer TRL's parse_response is given
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer
