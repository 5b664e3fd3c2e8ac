"""Training tasks and verifiers shipped with whileai, and loading a recipe's ``data`` and ``verifier`` sections.

Built-in tasks (``data.dataset: builtin:NAME``):

- ``builtin:echo_digits``: a synthetic task for a tiny random-weight model on a CPU. The prompt holds a digit;
  the verifier passes a completion that contains it and ends before the length limit. A longer completion has
  more chances to hit the digits, so a binary reward pays for length until rollouts run into the limit, the way
  agent rollouts grow under a pass/fail test; the passes differ in something measurable (how many words they spend).
- ``builtin:support``: the support scenarios of ``whileai.simulations`` as a multi-turn TRL environment
  (``environment_factory``), for a real instruct model.
- ``builtin:word_problems``: short arithmetic word problems for a real instruct model, single-turn, answered in
  ``\\boxed{}`` (``whileai.tasks.word_problems``, with a grader that reads the working).

Built-in verifiers (``verifier.builtin``): ``echoes_digits``, ``support`` (the scenario's end-state check, read from
the environment TRL passes) and ``word_problems`` (the boxed answer against the row's). A recipe may instead name its
own TRL-style reward function.

Your own task: rows from a file, a folder or a ``datasets`` name, plain or chat prompts, and with
``data.environment`` your own TRL environment class (``docs/own-task.md``).
"""

from __future__ import annotations

import functools
import inspect
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from whileai.config.build import TaskSetup
from whileai.errors import BadInput, describe, function_label, needs_extra
from whileai.grading.reference import load_callable
from whileai.rows.text import completion_text
from whileai.tasks.word_problems import final_answer, word_problem_rows

__all__ = [
    "TrainingTask",
    "check_columns",
    "check_verifier",
    "echoes_digits",
    "load_task",
    "load_verifier",
    "task_and_verifier",
]

# The words of builtin:echo_digits. Completions are drawn from the same vocabulary (the tokenizer is trained on it).
ECHO_WORDS = (
    "task please repeat the digit digits done when ready call look think check again then ok so and a b c d e f "
    "0 1 2 3 4 5 6 7 8 9"
).split()


def echoes_digits(
    prompts: Sequence[Any], completions: Sequence[Any], max_length: int | None = None, **kwargs: Any
) -> list[float]:
    """1.0 when the completion contains every digit of its prompt and finished, else 0.0 (``echoes_digits``).

    A completion that ran into ``max_length`` tokens (TRL's ``completion_ids``) was cut off, not finished: it fails,
    like an agent rollout that hits the length limit.

    Example:
        >>> echoes_digits(["task 4 7 please repeat the digits"] * 3, ["4 ok 7", "4 4", "7 4 4"],
        ...               max_length=3, completion_ids=[[1, 2], [1, 1], [2, 1, 1]])
        [1.0, 0.0, 0.0]
    """
    ids = kwargs.get("completion_ids")
    rewards = []
    for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        wanted = {w for w in completion_text(prompt).split() if w.isdigit()}
        said = set(completion_text(completion).split())
        cut_off = max_length is not None and ids is not None and len(ids[index]) >= max_length
        rewards.append(1.0 if wanted and wanted <= said and not cut_off else 0.0)
    return rewards


def support_verifier(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """The support scenario's end-state check, read from the environments TRL passes (``environment_factory``).

    The environment has no ``get_reward`` of its own (TRL would add it as a second reward); its ``verdict`` is read
    here, once, inside the one reward function.
    """
    environments = kwargs.get("environments")
    if environments is None:
        raise BadInput("the support verifier needs data.dataset: builtin:support (TRL's environment_factory)")
    return [1.0 if env.verdict.passed else 0.0 for env in environments]


BUILTIN_VERIFIERS: dict[str, Callable[..., list[float]]] = {
    "echoes_digits": echoes_digits,
    "support": support_verifier,
    "word_problems": final_answer,
}


@dataclass
class TrainingTask:
    """What the trainer needs from the ``data`` section.

    Attributes:
        rows: the training rows (a ``prompt`` column and any extra columns TRL passes to reward functions).
        eval_rows: the prompts held out for TRL's evaluation (``data.eval_prompts``), empty when none are.
        corpus: text a tiny model's tokenizer is trained on.
        environment_factory: a TRL environment class for multi-turn tasks, or None.
        demonstrations: for a multi-turn task, ``demonstrations(rollouts, seed)`` gives conversations as chat
            messages for a tiny model's tokenizer and warm start: that many seeded-agent conversations per scenario
            for the built-in task, each prompt with an empty first turn for your own environment.
    """

    rows: list[dict[str, Any]]
    corpus: list[str] = field(default_factory=list)
    eval_rows: list[dict[str, Any]] = field(default_factory=list)
    environment_factory: Any = None
    demonstrations: Callable[[int, int], list[list[dict[str, Any]]]] | None = None

    @property
    def chat(self) -> bool:
        """Whether the prompts are chat messages (a tiny model then gets a chat template)."""
        return any(isinstance(row.get("prompt"), list) for row in self.rows + self.eval_rows)


def _echo_digits(num_prompts: int, seed: int) -> TrainingTask:
    rng = random.Random(seed)
    rows = []
    for index in range(num_prompts):
        digit = rng.choice("0123456789")
        rows.append({"prompt": f"task {digit} please repeat the digit", "task_id": f"echo-{index}"})
    return TrainingTask(rows, corpus=[" ".join(ECHO_WORDS)] * 4 + [r["prompt"] for r in rows])


def _support(num_prompts: int | None, seed: int) -> TrainingTask:
    from whileai.simulations.environment import SupportEnvironment, environment_rows
    from whileai.simulations.scenarios import load_scenarios

    scenarios = load_scenarios("builtin:actions", n=num_prompts, seed=seed)
    rows = environment_rows(scenarios, seed=seed)
    factory = functools.partial(SupportEnvironment, scenarios, seed=seed)
    demonstrations = functools.partial(_support_demonstrations, scenarios)
    return TrainingTask([dict(r) for r in rows], environment_factory=factory, demonstrations=demonstrations)


def _support_demonstrations(scenarios: Sequence[Any], rollouts: int, seed: int) -> list[list[dict[str, Any]]]:
    """The seeded agent's conversations on each scenario, as TRL would build them (passes and failures alike)."""
    from whileai.simulations.agents import seeded_agent
    from whileai.simulations.environment import environment_conversation

    agent = seeded_agent(seed=seed)
    return [
        environment_conversation(scenario, agent, seed=f"warm:{seed}:{scenario.scenario_id}:{sample}")[0]
        for scenario in scenarios
        for sample in range(rollouts)
    ]


def load_task(setup: TaskSetup) -> TrainingTask:
    """The training rows of the run's ``data`` section (a built-in task or a rows file), with the prompts
    ``data.eval_prompts`` holds out for evaluation."""
    data = setup.data
    held_out = data.eval_prompts or 0
    if data.dataset.startswith("builtin:"):
        if data.dataset == "builtin:echo_digits":
            task = _echo_digits((data.num_prompts or 64) + held_out, data.seed)
        elif data.dataset == "builtin:word_problems":
            task = TrainingTask(word_problem_rows((data.num_prompts or 64) + held_out, data.seed))
        else:
            # one environment knows every scenario, so an evaluation row resets to its own
            task = _support(None if data.num_prompts is None else data.num_prompts + held_out, data.seed)
        if held_out:
            if held_out >= len(task.rows):
                raise BadInput(f"data.eval_prompts {held_out} leaves no training prompt of {len(task.rows)}")
            task.rows, task.eval_rows = task.rows[:-held_out], task.rows[-held_out:]
        return task
    rows = _own_rows(setup)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or data.prompt_key not in row:
            raise BadInput(f"data.dataset {data.dataset} row {number}: missing field {data.prompt_key!r}")
        if data.prompt_key != "prompt":
            row["prompt"] = row.pop(data.prompt_key)
    check_columns(rows, f"data.dataset {data.dataset}")
    available = len(rows) - held_out
    if data.num_prompts is not None and data.num_prompts > available:  # never fewer than asked without a word
        raise BadInput(
            f"data.num_prompts {data.num_prompts} with data.eval_prompts {held_out} needs "
            f"{data.num_prompts + held_out} rows, and data.dataset {data.dataset} has {len(rows)}: ask for at most "
            f"{max(available, 0)} prompts, or hold out fewer"
        )
    count = available if data.num_prompts is None else data.num_prompts
    if count < 1:
        raise BadInput(
            f"data.dataset {data.dataset}: its {len(rows)} rows leave no training prompt beside data.eval_prompts "
            f"{held_out}"
        )
    rows, eval_rows = rows[:count], rows[count : count + held_out]
    corpus = [prompt_words(r["prompt"]) for r in rows + eval_rows]
    if data.environment is None:
        return TrainingTask(rows, corpus=corpus, eval_rows=eval_rows)
    factory = load_callable(data.environment, setup.base_dir, what="data.environment")
    first = functools.partial(_first_turns, rows + eval_rows)
    return TrainingTask(rows, corpus, eval_rows, environment_factory=factory, demonstrations=first)


def _arrow_kind(value: Any) -> Any:
    """The shape a dataset column (Arrow) gives ``value``: None for a null, a name for a scalar, ``("list", kind)``
    and ``("mapping", {key: kind})``, which :func:`_joined` joins over a column's rows."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        try:
            return ("list", functools.reduce(_joined, map(_arrow_kind, value), None))
        except _Mixed as inner:  # one row's list holds both
            raise _Mixed(*inner.shapes, f"[]{inner.where}") from None
    if isinstance(value, dict):
        return ("mapping", {str(key): _arrow_kind(item) for key, item in value.items()})
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "number"
    return "text" if isinstance(value, str) else type(value).__name__


class _Mixed(ValueError):
    """Two shapes no one column holds, and where in the value (``['tests'][]``: a key, a list's items)."""

    def __init__(self, first: Any, second: Any, where: str = "") -> None:
        super().__init__(where)
        self.shapes, self.where = (first, second), where


def _joined(first: Any, second: Any) -> Any:
    """The one shape of a column that holds both ``first`` and ``second``; ``_Mixed`` when none does (a list and a
    number, a mapping and text, numbers and text in lists)."""
    if first is None or second is None or first == second:
        return second if first is None else first
    if not (isinstance(first, tuple) and isinstance(second, tuple) and first[0] == second[0]):
        raise _Mixed(first, second)
    if first[0] == "list":
        try:
            return ("list", _joined(first[1], second[1]))
        except _Mixed as inner:  # a conflict inside a mapping is named by its key; else the lists are shown whole
            raise _Mixed(*inner.shapes, f"[]{inner.where}") if inner.where else _Mixed(first, second) from None
    joined = {}
    for key in {**first[1], **second[1]}:
        try:
            joined[key] = _joined(first[1].get(key), second[1].get(key))
        except _Mixed as inner:
            raise _Mixed(*inner.shapes, f"[{key!r}]{inner.where}") from None
    return ("mapping", joined)


def _shown(kind: Any, many: bool = False) -> str:
    """A shape in words: ``a list of numbers``, ``text``, ``a mapping``; ``many``: as a list's items."""
    if isinstance(kind, tuple) and kind[0] == "list" and not many:
        return "a list" if kind[1] is None else f"a list of {_shown(kind[1], many=True)}"
    name = kind[0] if isinstance(kind, tuple) else kind
    return f"{name}s" if many else name if name == "text" else f"a {name}"


def check_columns(rows: Sequence[dict[str, Any]], where: str) -> None:
    """Refuse a column the trainer's dataset (``datasets``, on Arrow) cannot hold, before any grader or judge call:
    each column holds one shape over its rows, nulls aside (a list in one row and a number in another does not).

    Raises:
        BadInput: naming ``where``, the column, two rows (from 1) and their shapes, and the fix.
    """
    shapes: dict[str, tuple[Any, int]] = {}
    for number, row in enumerate(rows, start=1):
        for column, value in row.items():
            before, since = shapes.get(column, (None, number))
            try:
                kind = _arrow_kind(value)
                joined = _joined(before, kind)
            except _Mixed as mixed:
                (one, other), at = mixed.shapes, f" at {mixed.where}" if mixed.where else ""
                raise BadInput(
                    f"{where}: column {column!r} holds {_shown(one)}{at} in row {since} and {_shown(other)}{at} in row "
                    f"{number}, which one dataset column cannot hold: write its value as a JSON string in every row "
                    "(json.dumps) and read it with json.loads in your verifier"
                ) from None
            shapes[column] = (joined, since if joined == before else number)


def _own_rows(setup: TaskSetup) -> list[dict[str, Any]]:
    """The rows of a recipe's own ``data.dataset``: a rows file or folder beside the recipe, else a ``datasets`` name
    (``datasets.load_dataset(name, data.subset, split=data.split)``, from a model hub)."""
    from whileai.config.schema import is_rows_path
    from whileai.rows.groups import read_rows

    data = setup.data
    path = setup.resolve(data.dataset)
    if path.exists():
        return read_rows(path)
    if is_rows_path(data.dataset):
        raise BadInput(f"data.dataset: no such file {path}")
    with needs_extra("train", f"data.dataset: {data.dataset}"):
        import datasets
    try:
        loaded_rows = datasets.load_dataset(data.dataset, data.subset, split=data.split)
    except Exception as err:  # the hub unreachable, no such dataset, subset or split: datasets' own words
        raise BadInput(
            f"data.dataset: {data.dataset!r} is no file or folder beside the recipe ({path}), and datasets could "
            f"not load it as a dataset name: {describe(err)}"
        ) from None
    return [dict(row) for row in loaded_rows]


def prompt_words(prompt: Any) -> str:
    """A prompt's text as a tiny model's tokenizer is trained on it: a string as it is, chat messages as the tiny
    model's chat template writes them (``whileai.training.tiny.TINY_CHAT_TEMPLATE``)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return " ".join(f"{m.get('role', '')} : {m.get('content') or ''}" for m in prompt if isinstance(m, dict))
    return json.dumps(prompt)


def _first_turns(rows: Sequence[dict[str, Any]], rollouts: int, seed: int) -> list[list[dict[str, Any]]]:
    """Conversations that train a tiny model's chat tokenizer for your own environment: each prompt and an empty
    first turn (there is no agent to demonstrate your tools; a warm start is the built-in task's alone)."""
    conversations = []
    for row in rows:
        prompt = row["prompt"]
        messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        conversations.append([*messages, {"role": "assistant", "content": ""}])
    return conversations


# What TRL 1.16's GRPOTrainer passes every reward function by keyword besides the dataset's columns
# (``_calculate_rewards``); ``environments`` only with an environment_factory.
TRL_REWARD_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


def check_verifier_signature(verifier: Callable[..., Any], task: TrainingTask | None, where: str) -> None:
    """Refuse a verifier TRL could not call with this task's columns, before training: at run time every call would
    raise, and every completion would be unscorable. ``task`` None: the columns are not known here (a dataset named
    on the hub), so only what TRL passes every reward function is checked.

    Raises:
        BadInput: naming ``where`` (the recipe's verifier field and the function), the parameters it needs that
            nothing passes or the keywords it cannot take, and the fix.
    """
    try:
        signature = inspect.signature(verifier)
    except (TypeError, ValueError):  # a builtin or C callable without one: TRL will find out
        return
    columns = [] if task is None else sorted({key for row in task.rows[:1] for key in row if key != "prompt"})
    keywords = [*TRL_REWARD_KEYWORDS, *columns, *(["environments"] if task and task.environment_factory else [])]
    parameters = signature.parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    needs = [p.name for p in parameters if p.kind in named and p.default is p.empty and p.name not in keywords]
    where = f"{where} {function_label(verifier)}"  # the field, the function and where it is defined
    if needs and task is not None:
        raise BadInput(
            f"{where} needs {', '.join(map(repr, needs))}, which TRL does not pass and the dataset has no column for "
            f"(its columns: {', '.join(columns) or 'prompt only'}): add the column to data.dataset, or give the "
            "parameter a default"
        )
    if task is None:
        keywords = [k for k in keywords if k not in needs]  # columns the hub's dataset may well have
    try:
        signature.bind(**dict.fromkeys(keywords))
    except TypeError as err:
        raise BadInput(
            f"{where}: TRL calls it with the keywords {', '.join(keywords)} (the dataset's columns among them), and "
            f"it cannot take them ({err}); give it a **kwargs parameter: def check(prompts, completions, **kwargs)"
        ) from None


def check_verifier(setup: TaskSetup) -> None:
    """The run's verifier of the user's against what TRL passes it, before any model is built (``whileai validate``
    and ``whileai train``): with the dataset's columns where they can be read here (a built-in task, a rows file or
    folder); a dataset named on the hub is not fetched for it.

    Raises:
        BadInput: see :func:`check_verifier_signature`.
    """
    if setup.verifier.function is not None:
        task_and_verifier(setup, fetch=False)
    elif not setup.data.dataset.startswith("builtin:") and setup.resolve(setup.data.dataset).exists():
        load_task(setup)  # the rows' columns, which the trainer's dataset must hold


def task_and_verifier(setup: TaskSetup, *, fetch: bool = True) -> tuple[TrainingTask | None, Callable[..., Any]]:
    """The run's task and verifier, the verifier checked against what TRL passes it with the task's columns.

    ``fetch`` False leaves a dataset named on the hub unfetched (the task None): only what TRL passes every reward
    function is checked then.

    Raises:
        BadInput: see :func:`check_verifier_signature`.
    """
    local = setup.data.dataset.startswith("builtin:") or setup.resolve(setup.data.dataset).exists()
    task = load_task(setup) if local or fetch else None
    verifier = load_verifier(setup)
    check_verifier_signature(verifier, task, f"{setup.where}: verifier.function")
    return task, verifier


def load_verifier(setup: TaskSetup) -> Callable[..., list[float]]:
    """The run's verifier: a built-in by name or a TRL-style reward function by reference."""
    section = setup.verifier
    if section.builtin is not None:
        verifier = BUILTIN_VERIFIERS[section.builtin]  # the schema allows only these names
        if verifier in (echoes_digits, final_answer):  # a completion cut off at the limit did not finish
            limit = setup.trainer.model_dump().get("max_completion_length")
            return functools.partial(verifier, max_length=limit)
        return verifier
    assert section.function is not None
    function = load_callable(section.function, setup.base_dir, what="verifier")
    if not section.in_process:
        return function
    marked = functools.partial(function)  # the user's function untouched
    marked.in_process = True  # type: ignore[attr-defined]
    return marked
