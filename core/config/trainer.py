"""The recipe's ``trainer`` section: TRL ``GRPOConfig`` fields under TRL's own names, checked without importing TRL.

Any ``GRPOConfig`` field is allowed, with the kind of value TRL's own annotation gives it (``trl_fields``); a name
``GRPOConfig`` does not have is an error with the closest match. The batch arithmetic TRL checks only once torch is
imported (whole groups per generation batch, per evaluation batch) is checked here at parse time, and a trainer
``output_dir`` is refused: the run folder is the recipe's. This module validates; ``whileai.training.plan`` turns the
section into ``GRPOConfig`` arguments.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from whileai.config.trl_fields import GRPO_CONFIG_KINDS

__all__ = ["TrainerSection"]

# Each kind of GRPOConfig field: the type a value is checked as, and how an error names it.
_KINDS: dict[str, tuple[Any, str]] = {
    "bool": (bool, "true or false"),
    "int": (int, "an integer"),
    "float": (float, "a number"),
    "str": (str, "text"),
    "list[float]": (list[float], "a list of numbers"),
    "list[str]": (list[str], "a list of text"),
}


def _of_kind(name: str, kind: str, value: Any) -> Any:
    """``value`` checked (and converted: '1e-5' is a float) as the kind TRL's ``GRPOConfig`` field takes."""
    base = kind.rstrip("?")
    if value is None:
        if kind.endswith("?") or base == "any":
            return None
        raise ValueError(f"{name}: {_KINDS[base][1] if base in _KINDS else 'a value'} is needed, not null")
    if base == "any":
        return value
    if base == "float" and type(value) is int:  # logging_steps: 1 stays 1 (TRL takes a whole number or a ratio)
        return value
    try:
        converted = TypeAdapter(_KINDS[base][0]).validate_python(value)
    except ValidationError:
        nullable = " or null" if kind.endswith("?") else ""
        raise ValueError(f"{name}: {_KINDS[base][1]}{nullable} is needed, got {value!r}") from None
    if isinstance(converted, float) and not math.isfinite(converted):  # TRL takes inf, and trains on NaN
        raise ValueError(f"{name}: a finite number is needed, got {value!r}")
    if isinstance(converted, int) and not -INT_MOST <= converted <= INT_MOST:  # torch's and C's ints overflow past it
        raise ValueError(f"{name}: a whole number up to {INT_MOST} is needed, got one of {len(str(converted))} digits")
    if name in _SEEDS and not 0 <= converted <= SEED_MAX:
        raise ValueError(f"{name}: a seed from 0 to {SEED_MAX} is needed (numpy's range), got {value!r}")
    return converted


# Seeds reach numpy's seeding, which takes 0 to 2**32 - 1 and fails at the first step past it.
SEED_MAX = 2**32 - 1
# The largest whole number a trainer setting may hold: a length, a count or a step past it overflows where torch or
# tokenizers take it as a C int, after the model was built.
INT_MOST = 2**31 - 1
_SEEDS = ("data_seed",)


# Counts and sizes TRL takes without a word at 0 or below, each training something else than was meant (max_steps=-5
# trains for num_train_epochs). max_steps is TRL's own exception: -1 means "train for num_train_epochs".
_POSITIVE = (
    "num_train_epochs",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "generation_batch_size",
    "max_completion_length",
    "logging_steps",
    "save_steps",
    "eval_steps",
)


def _check_counts(extra: dict[str, Any]) -> None:
    steps = extra.get("max_steps")
    if isinstance(steps, int) and steps != -1 and steps < 1:
        raise ValueError(f"'max_steps' must be at least 1, or -1 to train for num_train_epochs (got {steps})")
    for name in _POSITIVE:
        value = extra.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise ValueError(f"{name!r} must be above 0 (got {value})")


# transformers' from_pretrained arguments a recipe may give through model_init_kwargs. Any other key goes to the
# model's config, whose names vary by model: only one a letter or two off a name here is taken for a misspelling.
_FROM_PRETRAINED = (
    "attn_implementation", "cache_dir", "device_map", "dtype", "force_download", "ignore_mismatched_sizes",
    "local_files_only", "low_cpu_mem_usage", "max_memory", "offload_folder", "quantization_config", "revision",
    "subfolder", "token", "torch_dtype", "trust_remote_code", "use_cache", "use_safetensors", "variant",
)  # fmt: skip


def _check_init_kwargs(kwargs: Any) -> None:
    """``model_init_kwargs``: a mapping whose keys are no misspelling of a ``from_pretrained`` argument (the model's
    constructor would refuse it only once training starts)."""
    for key in kwargs if isinstance(kwargs, dict) else ():  # TRL reads a string as JSON itself
        close = difflib.get_close_matches(str(key), _FROM_PRETRAINED, n=1, cutoff=0.85)
        if close and key not in _FROM_PRETRAINED:
            raise ValueError(f"model_init_kwargs: unknown key {key!r}; did you mean {close[0]!r}?")


class TrainerSection(BaseModel):
    """TRL ``GRPOConfig`` fields, under TRL's own names, handed over as ``GRPOConfig(**trainer)``.

    Any GRPOConfig field is allowed; a name GRPOConfig does not have is an error with the closest match.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    num_generations: int = Field(8, ge=2, description="Completions per prompt: the group size G.")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "none",
        description="TRL's division of advantages by a std. A grader arm needs 'none' so TRL trains on equation 3; "
        "a binary arm may use any.",
    )
    per_device_train_batch_size: int = Field(8, ge=1, description="Completions per device per step.")
    learning_rate: float = Field(1e-6, gt=0, allow_inf_nan=False, description="Adam learning rate.")
    seed: int = Field(42, ge=0, le=SEED_MAX, description="Seed of the run (numpy's range: 0 to 2**32 - 1).")

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_alias(cls, value: Any) -> Any:
        # TRL accepts booleans too: True is "group", False is "none".
        if value is True:
            return "group"
        if value is False:
            return "none"
        return value

    @model_validator(mode="after")
    def _known_fields(self) -> TrainerSection:
        extra = self.model_extra or {}
        if "output_dir" in extra:
            raise ValueError(
                "output_dir belongs at the recipe's top level: here it would split the run in two (checkpoints "
                "and completions in one folder, grading.jsonl and whileai_run.json in another)"
            )
        for name, value in list(extra.items()):
            if name not in GRPO_CONFIG_KINDS:
                close = difflib.get_close_matches(name, sorted(GRPO_CONFIG_KINDS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{name!r} is not a field of TRL's GRPOConfig{hint}")
            extra[name] = _of_kind(name, GRPO_CONFIG_KINDS[name], value)
        _check_counts(extra)
        _check_init_kwargs(extra.get("model_init_kwargs"))
        return self

    @model_validator(mode="after")
    def _whole_groups_per_batch(self) -> TrainerSection:
        # TRL's GRPOConfig checks these only once torch is imported; the arithmetic needs none of it. Processes: the
        # launcher's WORLD_SIZE (1 for `whileai validate` on its own).
        extra = self.model_extra or {}
        processes = int(os.environ.get("WORLD_SIZE") or 1)
        per_device = self.per_device_train_batch_size
        steps, size = extra.get("steps_per_generation"), extra.get("generation_batch_size")
        if steps is not None and size is not None:
            raise ValueError("give steps_per_generation or generation_batch_size, not both")
        if size is None:
            steps = steps or extra.get("gradient_accumulation_steps") or 1
            size = per_device * processes * steps
            how = f"per_device_train_batch_size {per_device} x {processes} process(es) x steps_per_generation {steps}"
        else:
            how = "generation_batch_size"
            if size % (per_device * processes):
                raise ValueError(
                    f"generation_batch_size {size} must be divisible by the global batch size {per_device * processes}"
                )
        if size % self.num_generations:
            raise ValueError(
                f"the generation batch, {how} = {size}, must be divisible by num_generations {self.num_generations}: "
                "each prompt's completions are graded as one group in one batch"
            )
        evaluation = extra.get("eval_strategy")
        if evaluation not in (None, "no"):
            group = extra.get("num_generations_eval") or self.num_generations
            batch = (extra.get("per_device_eval_batch_size") or 8) * processes
            if batch % group:
                raise ValueError(
                    f"the evaluation batch, per_device_eval_batch_size x {processes} process(es) = {batch}, must be "
                    f"divisible by num_generations_eval {group}"
                )
        return self

    def grpo_kwargs(self) -> dict[str, Any]:
        """The section as keyword arguments for ``GRPOConfig``."""
        return self.model_dump()
