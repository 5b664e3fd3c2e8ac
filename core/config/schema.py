"""The recipe format: one strict pydantic model per YAML section.

A recipe is a YAML file of sections (``grader``, ``grading``, ``spread``, ``verifier``, ``model``, ``data``,
``trainer``, ``simulate``, ``output_dir``). Unknown keys are errors (a typo never falls back to a default), every
field says what it does, and cross-field checks fail at parse time with the fix. A section is required only by the
commands that use it: ``whileai spread`` needs a grader and nothing else, ``whileai train`` needs model, data and
verifier (``Recipe.require``).

This module validates; it builds nothing. ``whileai.config.build`` turns the grader section into a callable and the
training integration turns the trainer section (``whileai.config.trainer``) into TRL's ``GRPOConfig``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from whileai.config.trainer import TrainerSection
from whileai.defaults import SPREAD_CONTROL_GROUPS, VERIFIER_TIMEOUT_S
from whileai.errors import BadInput
from whileai.grading.guard import signal_problems
from whileai.grading.knobs import GradingKnobs, RecipeThresholds, SpreadThresholds, WatchSettings
from whileai.grading.scripted import ScriptedRule
from whileai.judge.settings import JudgeConfig
from whileai.rows.fields import RowFields
from whileai.rows.files import SUFFIXES

__all__ = [
    "DataSection",
    "GradingSection",
    "JudgeGraderSection",
    "ModelSection",
    "PythonGraderSection",
    "Recipe",
    "ScriptedGraderSection",
    "ScriptedRule",
    "SimulateSection",
    "SpreadSampleSection",
    "SpreadSection",
    "TinySection",
    "TrainerSection",
    "VerifierSection",
    "WarmStartSection",
]

# A callable named as ``package.module:function`` or ``path/to/file.py:function``.
_REFERENCE = re.compile(r"^[^:\s]+:[A-Za-z_][A-Za-z0-9_.]*$")


class Section(BaseModel):
    """A recipe section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=False)


def _check_reference(value: str | None) -> str | None:
    if value is not None and not _REFERENCE.match(value):
        raise ValueError(f"{value!r} is not 'module:function' or 'path/to/file.py:function'")
    return value


class ScriptedGraderSection(Section):
    """``kind: scripted``: a rule from this section, or from a rule file."""

    kind: Literal["scripted"]
    rule: ScriptedRule = Field(default_factory=ScriptedRule, description="The ranking and hack rule.")


class PythonGraderSection(Section):
    """``kind: python``: a grader function of yours."""

    kind: Literal["python"]
    function: str = Field(
        description="The grader as 'package.module:function' or 'path/to/file.py:function' (a path is relative to "
        "the recipe). Advantage mode: function(group) -> {'ranking': [...]} | {'factors': {...}} (+ 'hacks'); "
        "reward mode: function(item, rubric) -> {'solution': s, 'behavior': b}."
    )

    thread_safe: bool = Field(
        False,
        description="The function may grade several groups at once; whileai then calls it on up to 8 groups at a "
        "time. Leave false for a function that keeps state.",
    )
    in_process: bool = Field(
        False,
        description="Run the function in the training process (on a thread) instead of a worker process of its own: "
        "for a grader that holds a model on the GPU, which a forked process cannot use. Its time limit then holds "
        "only while it lets other threads run, and what it prints or forks is not kept apart.",
    )

    @field_validator("function")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        return _check_reference(value)


class JudgeGraderSection(Section):
    """``kind: judge``: a model behind an OpenAI-compatible endpoint reads each group."""

    kind: Literal["judge"]
    judge: JudgeConfig = Field(
        description="The judge's settings: base_url, model, api_key_env (the NAME of the variable holding the key), "
        "temperature, max_tokens, concurrency, permutations, prompts, cache_dir, ... (whileai.judge.JudgeConfig)."
    )


GraderSection = Annotated[ScriptedGraderSection | PythonGraderSection | JudgeGraderSection, Field(discriminator="kind")]


class GradingSection(GradingKnobs, Section):
    """How the grader's answers become rewards or advantages: ``whileai.grading.knobs.GradingKnobs`` (the page's knobs,
    declared there once), plus where reward mode finds its rubrics."""

    model_config = ConfigDict(extra="forbid", strict=False, validate_assignment=True, populate_by_name=False)

    rubrics: str | dict[str, Any] | None = Field(
        None,
        description="Reward mode: a mapping task_id -> rubric, or the path of a YAML/JSON file holding one "
        "(relative to the recipe).",
    )


class SpreadSampleSection(Section):
    """The spread gate on the initial policy's own completions (``whileai train``, single-turn tasks)."""

    prompts: int = Field(
        16,
        ge=1,
        description="Training prompts to sample trainer.num_generations completions for (the first ones, reused when "
        "the dataset is shorter).",
    )
    seed: int = Field(0, description="Seed of the sampling.")


class SpreadSection(RecipeThresholds, Section):
    """The spread gate: which rows to grade before training, and what counts as spread
    (``whileai.grading.knobs.SpreadThresholds``, declared there once; ``thresholds()`` gives them alone)."""

    model_config = ConfigDict(
        extra="forbid", strict=False, frozen=False, validate_assignment=True, populate_by_name=False
    )

    rows: str | None = Field(
        None, description="Rows to grade: a .jsonl, .json or .parquet file or a folder of them (relative to recipe)."
    )
    sample: SpreadSampleSection | None = Field(
        None,
        description="whileai train: grade groups the initial model writes for a few training prompts (verified by "
        "the recipe's verifier) before the first step. spread.rows, when given, comes first; then sample; then the "
        "simulate section.",
    )
    group_key: str | None = Field(
        None, description="Field naming a row's group; 'scenario_id' (or 'prompt' for TRL completion logs)."
    )
    reward_key: str | None = Field(
        None, description="Field holding the verifier's reward; 'reward' (or 'whileai_reward' in TRL logs)."
    )
    text_key: str | None = Field(
        None, description="Field holding the rollout text; 'final_text' (or 'completion' in TRL logs)."
    )
    prompt_key: str = Field("prompt", description="Field holding the task prompt (optional in rows).")
    skip_bad_rows: bool = Field(False, description="Skip malformed rows (counted and reported) instead of failing.")
    controls: int = Field(
        SPREAD_CONTROL_GROUPS,
        ge=0,
        description="Graded groups shown to the grader again, shuffled and with copies of one pass (identical, with an "
        "injection, changed on its surface), to check that it reads the work, not position or surface (one extra "
        "grader call each; 0: no controls).",
    )
    seed: int = Field(0, description="Seed of the controls' shuffles.")
    watch: WatchSettings = Field(
        default_factory=WatchSettings,
        description="whileai train: the gate's checks repeated while a grader arm trains "
        "(whileai.grading.watch): every, window, controls, max_extra_calls, on_fail, patience, enabled.",
    )

    def thresholds(self) -> SpreadThresholds:
        """The gate's thresholds this section sets (the share of controls measured keeps its default)."""
        return SpreadThresholds(**{name: getattr(self, name) for name in RecipeThresholds.model_fields})

    def row_fields(
        self, group_key: str | None = None, reward_key: str | None = None, text_key: str | None = None
    ) -> RowFields:
        """The fields rows are read by: the keys given (the command line's options), else this section's."""
        return RowFields(
            group_key or self.group_key, reward_key or self.reward_key, text_key or self.text_key, self.prompt_key
        )


# More prompts than any run trains on: a built-in task makes this many rows before the first step.
MOST_PROMPTS = 1_000_000


class VerifierSection(Section):
    """The program that says pass or fail."""

    function: str | None = Field(
        None,
        description="A TRL-style reward function 'module:function' or 'path.py:function': "
        "function(prompts, completions, **columns) -> list[float].",
    )
    builtin: str | None = Field(
        None, description="A built-in verifier by name (echoes_digits, support, word_problems), instead of a function."
    )
    in_process: bool = Field(
        False,
        description="Run the function in the training process instead of a process forked for each batch (one that "
        "uses the GPU); its time limit then does not hold.",
    )
    timeout_s: float | None = Field(
        VERIFIER_TIMEOUT_S,
        gt=0,
        allow_inf_nan=False,
        description="The longest the function may take on one batch (it runs in a process of its own); past it the "
        "batch is unscorable (zero advantage, counted). null: no limit.",
    )

    @field_validator("function")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        return _check_reference(value)

    @field_validator("builtin")
    @classmethod
    def _known_builtin(cls, value: str | None) -> str | None:
        if value is not None and value not in BUILTIN_VERIFIERS:
            raise ValueError(f"unknown built-in verifier {value!r} (allowed: {', '.join(BUILTIN_VERIFIERS)})")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> VerifierSection:
        if (self.function is None) == (self.builtin is None):
            raise ValueError("give exactly one of verifier.function and verifier.builtin")
        return self


class WarmStartSection(Section):
    """Supervised steps before RL for a tiny model on a multi-turn task: it learns to call tools from the seeded
    agent's demonstrations, passes and failures alike, tokenized as TRL tokenizes a rollout."""

    rollouts: int = Field(16, ge=1, description="Seeded-agent demonstrations per training scenario.")
    steps: int = Field(120, ge=0, description="Optimizer steps (0: random weights).")
    batch_size: int = Field(16, ge=1, description="Demonstrations per step.")
    learning_rate: float = Field(3e-3, gt=0, description="AdamW learning rate.")


class TinySection(Section):
    """A tiny Llama built from a config with random weights (``whileai.training.tiny``); unset fields keep its
    defaults (64 wide, 2 layers, 4 heads)."""

    hidden_size: int | None = Field(None, ge=1, description="Width of the model.")
    intermediate_size: int | None = Field(None, ge=1, description="Width of the MLP.")
    num_hidden_layers: int | None = Field(None, ge=1, description="Transformer layers.")
    num_attention_heads: int | None = Field(None, ge=1, description="Attention heads (they divide hidden_size).")
    num_key_value_heads: int | None = Field(None, ge=1, description="Key/value heads (they divide the heads).")
    max_position_embeddings: int | None = Field(None, ge=1, description="The longest sequence, prompt included.")
    tie_word_embeddings: bool | None = Field(None, description="Share the input and output embeddings.")
    rope_theta: float | None = Field(None, gt=0, description="RoPE base.")

    @model_validator(mode="after")
    def _heads_divide(self) -> TinySection:
        hidden = self.hidden_size or 64
        heads = self.num_attention_heads or 4
        if hidden % heads:
            raise ValueError(f"hidden_size {hidden} is not divisible by num_attention_heads {heads}")
        if heads % (self.num_key_value_heads or heads):
            raise ValueError(f"num_attention_heads {heads} is not divisible by num_key_value_heads")
        return self

    def config(self) -> dict[str, Any]:
        """The values given, as ``LlamaConfig`` keyword arguments."""
        return self.model_dump(exclude_none=True)


class LoraSection(Section):
    """LoRA adapters trained in place of the whole model (peft's ``LoraConfig``, handed to TRL as ``peft_config``):
    the base weights stay frozen, so no optimizer state is kept for them and their gradients are not computed."""

    r: int = Field(16, ge=1, description="The adapters' rank.")
    alpha: float = Field(32, gt=0, description="lora_alpha: the adapters' update is scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' input (lora_dropout).")
    target_modules: str | list[str] = Field(
        "all-linear",
        description="The layers that get adapters: 'all-linear' (every linear layer but the output head), or their "
        "names, e.g. [q_proj, v_proj].",
    )

    def peft_kwargs(self) -> dict[str, Any]:
        """``peft.LoraConfig`` keyword arguments."""
        return {
            "r": self.r,
            "lora_alpha": self.alpha,
            "lora_dropout": self.dropout,
            "target_modules": self.target_modules,
            "task_type": "CAUSAL_LM",
        }


class ModelSection(Section):
    """The policy model."""

    name_or_path: str | None = Field(
        None, description="A model id or a local folder, loaded with transformers' from_pretrained."
    )
    tiny: TinySection | None = Field(
        None,
        description="Build a tiny causal LM with random weights from these config values instead (no download); "
        "the tokenizer is trained locally on the task's text.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Weights' dtype.")
    threads: int | None = Field(
        None,
        ge=1,
        description="torch's CPU threads while training on the CPU. Default: 1 for a tiny model (its matrices are too "
        "small to share across cores, and a second thread beside a busy process slows it down), torch's own "
        "otherwise.",
    )
    tool_calls: Literal["template", "json"] = Field(
        "template",
        description="A multi-turn task's tool calls TRL runs: 'template', those in the chat template's own form "
        '(Qwen2.5\'s <tool_call>); \'json\', also a bare JSON call in the message, {"name": <a tool>, "arguments": '
        "{...}}, as small instruct models write them (whileai.integrations.tool_calls).",
    )
    warm_start: WarmStartSection | None = Field(
        None,
        description="A tiny model on a multi-turn task (data.dataset: builtin:support) only: supervised steps on "
        "the seeded agent's conversations before RL, so the policy starts out calling tools.",
    )
    lora: LoraSection | None = Field(
        None,
        description="Train LoRA adapters instead of every weight (peft); the run's checkpoints and final/ then hold "
        "the adapters, which transformers loads over the base model.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelSection:
        if (self.name_or_path is None) == (self.tiny is None):
            raise ValueError("give exactly one of model.name_or_path and model.tiny")
        if self.warm_start is not None and self.tiny is None:
            raise ValueError("model.warm_start applies to a tiny model (model.tiny) only")
        return self


# The built-in tasks and verifiers (``whileai.tasks.load``; a test keeps the two lists equal).
BUILTIN_DATASETS = ("builtin:echo_digits", "builtin:support", "builtin:word_problems")
BUILTIN_VERIFIERS = ("echoes_digits", "support", "word_problems")
BUILTIN_TASK_OF_VERIFIER = dict(zip(BUILTIN_VERIFIERS, BUILTIN_DATASETS, strict=True))


class DataSection(Section):
    """The training prompts: a built-in task, or your own rows (a file, a folder of files, or a ``datasets`` name)."""

    dataset: str = Field(
        description="A built-in task (builtin:echo_digits, builtin:support, builtin:word_problems); a .jsonl, .json "
        "or .parquet file of rows or a folder of them (relative to the recipe); or a name datasets.load_dataset "
        "reads from a model hub (e.g. openai/gsm8k, with data.subset and data.split). Every column reaches the "
        "verifier and the environment as a keyword argument."
    )

    @field_validator("dataset")
    @classmethod
    def _known_builtin(cls, value: str) -> str:
        if value.startswith("builtin:") and value not in BUILTIN_DATASETS:
            raise ValueError(f"unknown built-in task {value!r} (allowed: {', '.join(BUILTIN_DATASETS)})")
        return value

    prompt_key: str = Field(
        "prompt", description="Column holding the prompt: a string, or a list of chat messages ({role, content})."
    )
    subset: str | None = Field(None, description="A datasets name's configuration (load_dataset's second argument).")
    split: str = Field("train", description="A datasets name's split.")
    environment: str | None = Field(
        None,
        description="Your multi-turn task: a TRL environment class (path/to/file.py:Class or package.module:Class), "
        "TRL's environment_factory. TRL makes one per rollout, calls reset(**row) and offers its public methods "
        "as tools; the verifier reads them from its `environments` keyword.",
    )
    num_prompts: int | None = Field(None, gt=0, le=MOST_PROMPTS, description="Use only the first N prompts.")
    eval_prompts: int | None = Field(
        None,
        gt=0,
        le=MOST_PROMPTS,
        description="Hold out N prompts as TRL's evaluation dataset (for trainer.eval_strategy): a built-in task "
        "generates N more; your rows give the N rows after data.num_prompts, or their last N when num_prompts is "
        "unset.",
    )
    seed: int = Field(0, description="Seed for generating built-in tasks.")

    @model_validator(mode="after")
    def _own_rows_only(self) -> DataSection:
        builtin = self.dataset.startswith("builtin:")
        if builtin and self.environment is not None:
            raise ValueError(
                f"data.environment is for your own rows; {self.dataset} brings its own (remove data.environment)"
            )
        if self.subset is not None and (builtin or is_rows_path(self.dataset)):
            raise ValueError(f"data.subset is for a datasets name; {self.dataset} is not one (remove data.subset)")
        return self


def is_rows_path(name: str) -> bool:
    """Whether a ``data.dataset`` value can only be a rows file or folder, not a ``datasets`` name: a rows suffix, or
    a path that starts as one (``./``, ``../``, ``/``, ``~``). A bare ``owner/name`` is read as a folder where one
    exists beside the recipe, else as a ``datasets`` name (``whileai.tasks.load.load_task``)."""
    return name.endswith(SUFFIXES) or name.startswith(("./", "../", "/", "~", ".\\"))


class SimulateSection(Section):
    """Rollouts simulated before the spread gate, with the built-in scenarios and the seeded agent."""

    scenarios: str = Field("builtin:all", description="Which scenarios: 'builtin:refunds', 'builtin:all', ...")
    agent: Literal["seeded", "model"] = Field(
        "seeded",
        description="Which agent: 'seeded' (scripted, offline) or 'model' (a served policy; whileai simulate "
        "--base-url URL --model NAME).",
    )
    n: int = Field(8, ge=1, description="Rollouts per scenario (the group size).")
    num_scenarios: int | None = Field(None, gt=0, description="Use only the first N scenarios.")
    seed: int = Field(0, description="Seed of the scenarios and the agent.")


class Recipe(Section):
    """A whole recipe. Sections are optional here; each command requires the ones it uses."""

    include: list[str] = Field(
        default_factory=list, description="Files from configs/ merged under this recipe, in order."
    )
    grader: GraderSection | None = Field(None, description="The grader: scripted, python or judge.")
    grading: GradingSection = Field(default_factory=GradingSection, description="The grading knobs.")
    spread: SpreadSection = Field(default_factory=SpreadSection, description="The spread gate.")
    verifier: VerifierSection | None = Field(None, description="The program that says pass or fail.")
    model: ModelSection | None = Field(None, description="The policy model.")
    data: DataSection | None = Field(None, description="The training prompts.")
    trainer: TrainerSection = Field(default_factory=TrainerSection, description="TRL GRPOConfig fields.")
    simulate: SimulateSection | None = Field(None, description="Simulate rollouts for the spread gate.")
    output_dir: str = Field("runs/whileai", description="The run directory (relative to the working directory).")
    comparison_arm: str | None = Field(
        None,
        description="Name of this arm when the recipe is one arm of a comparison (e.g. 'binary'); `whileai report` "
        "warns when two compared arms differ in trainer.scale_rewards.",
    )

    @model_validator(mode="after")
    def _grader_arm_trains_on_equation_3(self) -> Recipe:
        # A grader arm (GAR or GRS) must reach TRL untouched: no std division, no other aggregation, weight 1. A
        # binary arm (no grader) may scale as it likes; the plan says what it does.
        if self.grader is None:
            return self
        extra = self.trainer.model_extra or {}
        problems = signal_problems(
            scale_rewards=self.trainer.scale_rewards,
            multi_objective_aggregation=extra.get("multi_objective_aggregation", "sum_then_normalize"),
            reward_weights=extra.get("reward_weights"),
        )
        if problems:
            raise ValueError(
                f"{problems[0]} (with a grader, TRL must train on equation 3 exactly; a binary comparison arm may "
                "scale as it likes)"
            )
        return self

    @model_validator(mode="after")
    def _evaluation_has_prompts(self) -> Recipe:
        # TRL builds the trainer, then refuses an evaluation strategy without an eval_dataset: say it here instead.
        extra = self.trainer.model_extra or {}
        evaluates = extra.get("eval_strategy") not in (None, "no") or bool(extra.get("eval_on_start"))
        held_out = self.data is not None and self.data.eval_prompts is not None
        if evaluates and not held_out:
            raise ValueError(
                "trainer.eval_strategy (or eval_on_start) evaluates on prompts the recipe does not give: set "
                "data.eval_prompts: N to hold out N prompts, or remove the evaluation settings"
            )
        if held_out and not evaluates:
            raise ValueError(
                "data.eval_prompts holds out prompts that nothing evaluates: set trainer.eval_strategy: steps (with "
                "trainer.eval_steps), or remove data.eval_prompts"
            )
        return self

    @model_validator(mode="after")
    def _sample_needs_a_single_turn_task(self) -> Recipe:
        if self.spread.sample is None or self.data is None:
            return self
        if self.data.dataset == "builtin:support":
            raise ValueError(
                "spread.sample generates single-turn completions; the multi-turn support task gates on the simulate "
                "section (remove spread.sample)"
            )
        if self.data.environment is not None:
            raise ValueError(
                "spread.sample generates single-turn completions, without data.environment's tools; gate a "
                "multi-turn task on rollouts you have (spread.rows: rows.jsonl), or remove spread.sample"
            )
        return self

    @model_validator(mode="after")
    def _builtin_verifier_reads_its_task(self) -> Recipe:
        # Each built-in verifier reads what its own built-in task's rows carry (the digits, the environment, the
        # answer column); with another built-in task every completion would be unscorable at run time.
        builtin = self.verifier.builtin if self.verifier is not None else None
        dataset = self.data.dataset if self.data is not None else None
        if builtin is not None and dataset in BUILTIN_DATASETS:
            task = BUILTIN_TASK_OF_VERIFIER[builtin]
            if dataset != task:
                raise ValueError(
                    f"verifier.builtin: {builtin} reads the rows of data.dataset: {task}, and the recipe's task is "
                    f"{dataset}: set verifier.builtin to the one for {dataset}, or name a verifier.function"
                )
        return self

    @model_validator(mode="after")
    def _warm_start_needs_conversations(self) -> Recipe:
        if self.model is not None and self.model.warm_start is not None:
            if self.data is None or self.data.dataset != "builtin:support":
                raise ValueError(
                    "model.warm_start needs the multi-turn support task (data.dataset: builtin:support): its "
                    "demonstrations are the seeded agent's conversations"
                )
        return self

    @model_validator(mode="after")
    def _paths_a_system_can_open(self) -> Recipe:
        # A NUL ends a path in every system call: Python refuses such a path only when it first opens it.
        for name, path in [("output_dir", self.output_dir), *self.local_files(Path("."))]:
            if "\x00" in path:
                raise ValueError(f"{name} holds a NUL character (\\x00), which no path can: remove it")
        return self

    def local_files(self, base_dir: Path) -> list[tuple[str, str]]:
        """Every field that names a file or folder of the user's, as ``(dotted field, the path as written)``: rows,
        rubrics, a function's ``.py`` file, the dataset when it is a rows file or folder (not a ``datasets`` name).
        Relative paths are relative to ``base_dir``, the recipe's folder: ``whileai.config.build.check_references``
        checks them, ``LoadedRecipe.dump`` writes them absolute into a run folder's recipe."""
        found: list[tuple[str, str]] = []
        if self.spread.rows:
            found.append(("spread.rows", self.spread.rows))
        if isinstance(self.grading.rubrics, str):
            found.append(("grading.rubrics", self.grading.rubrics))
        for name, reference in self.functions():
            target = reference.rpartition(":")[0]
            if target.endswith(".py") or "/" in target or "\\" in target:
                found.append((name, target))
        if self.data is not None and not self.data.dataset.startswith("builtin:"):
            dataset = self.data.dataset
            if is_rows_path(dataset) or (base_dir / Path(dataset).expanduser()).exists():
                found.append(("data.dataset", dataset))
        return found

    def functions(self) -> list[tuple[str, str]]:
        """Every function the recipe names, as ``(dotted field, module:function or file.py:function)``."""
        named = (
            ("grader.function", getattr(self.grader, "function", None)),
            ("verifier.function", getattr(self.verifier, "function", None)),
            ("data.environment", getattr(self.data, "environment", None)),
        )
        return [(name, reference) for name, reference in named if reference]

    def require(self, *sections: str, command: str) -> None:
        """Raise ``BadInput`` naming each section ``command`` needs and the recipe lacks, and for ``train`` what in
        the recipe a training run cannot do (``training_problems``)."""
        missing = [name for name in sections if getattr(self, name) is None]
        if missing:
            raise BadInput(f"`whileai {command}` needs the recipe section(s) {', '.join(missing)}")
        if command == "train" and (problems := self.training_problems()):
            raise BadInput(problems[0])

    def gate_source(self) -> str | None:
        """Where ``whileai train``'s spread gate reads its rows: spread.rows, then spread.sample, then the simulate
        section (None: the gate is skipped, as it is for a binary arm, which has no grader)."""
        if self.grader is None:
            return None
        if self.spread.rows:
            return "rows"
        if self.spread.sample is not None:
            return "sample"
        return "simulate" if self.simulate is not None else None

    def training_problems(self) -> list[str]:
        """What ``whileai train`` cannot do with this recipe, each naming the field and the fix (``whileai
        validate`` says them of a recipe with a model section)."""
        problems = []
        if self.gate_source() == "simulate" and self.simulate is not None and self.simulate.agent == "model":
            problems.append(
                "simulate.agent: model: whileai train simulates its gate's rollouts with the seeded agent only (a "
                "served policy's endpoint is given to whileai simulate on its command line): write them with "
                "`whileai simulate --agent model --base-url URL --model NAME -o rows.jsonl` and set spread.rows: "
                "rows.jsonl, or set simulate.agent: seeded"
            )
        return problems
