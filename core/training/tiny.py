"""A tiny causal LM with random weights and a locally trained tokenizer, for training on a CPU with no download.

``build_tiny_model`` writes a model folder (config, random weights, tokenizer) that TRL loads by path, the way it
loads any model (TRL's colocate mode reloads the model by name, so an in-memory model is saved first). The tokenizer
is a word-level tokenizer trained with ``tokenizers`` on the task's own text, so every word of the task is one token.

``build_tiny_agent_model`` does the same for a multi-turn tool-calling task (TRL's ``environment_factory``): a
byte-level BPE tokenizer trained on the task's conversations, with TRL's Qwen2.5 chat template (TRL parses tool
calls for that template and knows its training variant), and a warm start: a few supervised steps on an agent's
demonstrations, tokenized exactly as TRL tokenizes a rollout (prompt, each turn the model writes, each tool answer
as TRL's suffix), the loss on the model's turns only. A random-weight model never writes a parseable tool call, so
RL from it would see no pass; the warm-started one starts where an instruct model starts: calling tools, passing
some scenarios and failing others, in varied ways.

A warm start takes about a minute on a CPU, and a run builds the same model as another run with the same
demonstrations, settings and seed (the two arms of a comparison): ``agent_model_key`` names it, and
``from_cache``/``to_cache`` keep a copy under ``whileai.defaults.cache_dir("tiny")`` that the next run copies
(``building`` makes a run that would build it while another does wait for that one).

Imports torch, transformers, tokenizers and trl inside the functions: ``import whileai.training.tiny`` is light.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import inspect
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whileai.errors import needs_extra
from whileai.progress import phase

__all__ = [
    "SPECIAL_TOKENS",
    "TINY_CHAT_TEMPLATE",
    "WarmStart",
    "agent_model_key",
    "build_recipe_model",
    "build_tiny_agent_model",
    "build_tiny_model",
    "building",
    "from_cache",
    "to_cache",
    "train_chat_tokenizer",
    "train_tokenizer",
    "trl_rollout_ids",
]

SPECIAL_TOKENS = {"pad_token": "<pad>", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}

# A small Llama: two layers, 64 wide. About 40k parameters with a 40-word vocabulary.
TINY_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}


def train_tokenizer(texts: Iterable[str]) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` trained on ``texts`` (whitespace-separated words)."""
    with needs_extra("train", "a tiny model's tokenizer"):
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS.values()), min_frequency=1)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    from tokenizers import decoders

    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)
    fast.padding_side = "left"
    return fast


# A tiny model's chat template for chat prompts without tools: each message as "role : content", words apart, so the
# word-level tokenizer reads the roles and the separator as words of their own.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def build_tiny_model(
    folder: str | Path,
    texts: Iterable[str],
    config: Mapping[str, Any] | None = None,
    seed: int = 0,
    chat: bool = False,
) -> Path:
    """Write a random-weight Llama and its tokenizer (trained on ``texts``) to ``folder``; return the folder.

    Args:
        folder: where to save; ``from_pretrained(folder)`` loads it back.
        texts: the task's text (prompts and the words completions may use); chat prompts as
            ``TINY_CHAT_TEMPLATE`` writes them.
        config: ``LlamaConfig`` values over ``TINY_DEFAULTS``.
        seed: the seed of the random weights.
        chat: give the tokenizer ``TINY_CHAT_TEMPLATE``, for chat prompts.
    """
    with needs_extra("train", "a tiny model"):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer([*texts, "system : user : assistant :"] if chat else texts)
    if chat:
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
    values = {**TINY_DEFAULTS, **(config or {})}
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **values,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


# The chat tokenizer's special tokens, Qwen2.5's names (TRL's template for it is the one used).
CHAT_EOS = "<|im_end|>"
CHAT_PAD = "<|endoftext|>"
_CHAT_SPECIAL = [CHAT_PAD, "<|im_start|>", CHAT_EOS]
_CHAT_ADDED = ["<tool_call>", "</tool_call>"]


@dataclass(frozen=True)
class WarmStart:
    """The supervised steps before RL (see the module docstring).

    Attributes:
        steps: optimizer steps.
        batch_size: conversations per step.
        learning_rate: AdamW's learning rate.
    """

    steps: int = 120
    batch_size: int = 16
    learning_rate: float = 3e-3


def _qwen_template() -> str:
    """TRL's copy of Qwen2.5's chat template: TRL recognizes it by equality to parse tool calls."""
    with needs_extra("train", "a tiny agent model's chat template"):
        from trl.chat_template_utils import qwen2_5_chat_template
    return qwen2_5_chat_template


def train_chat_tokenizer(conversations: Sequence[Sequence[Mapping[str, Any]]], tools: Sequence[Any], vocab: int = 2048):
    """A byte-level BPE tokenizer with TRL's Qwen2.5 chat template, trained on ``conversations`` as the template
    renders them (tools included).

    Merges may cross word boundaries (not lines), so the long system prompt with its tool schemas, repeated in every
    conversation, becomes a few tokens a line; any text still encodes (byte level), so malformed output decodes.
    ``<|im_end|>`` is the EOS token (the end of a turn), ``<|endoftext|>`` the padding.
    """
    with needs_extra("train", "a tiny model's tokenizer"):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    template = _qwen_template()
    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    texts = [
        renderer.apply_chat_template(list(c), tools=list(tools), chat_template=template, tokenize=False)
        for c in conversations
    ]
    tokenizer = Tokenizer(models.BPE())
    # Merges stop at line ends: a token never spans a tool call and the tool's answer on the next line.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="merged_with_previous"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=_CHAT_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=CHAT_EOS, pad_token=CHAT_PAD)
    fast.add_tokens(_CHAT_ADDED)  # tool-call markers: whole tokens, kept when decoding
    fast.chat_template = template
    fast.padding_side = "left"
    return fast


def _turn_text(message: Mapping[str, Any]) -> str:
    """What the model writes for one assistant turn after ``<|im_start|>assistant\n`` (Qwen2.5's format)."""
    parts = [str(message.get("content") or "")] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)
        arguments = json.dumps(function.get("arguments", {}), ensure_ascii=False)
        parts.append(f'<tool_call>\n{{"name": "{function["name"]}", "arguments": {arguments}}}\n</tool_call>')
    return "\n".join(parts)


def _tool_suffix_ids(tokenizer: Any, tool_messages: list[Mapping[str, Any]], template: str) -> list[int]:
    """The ids TRL 1.16 inserts after a turn with tool calls (``GRPOTrainer._get_tool_suffix_ids``): the template
    applied to a dummy exchange with and without the tool answers, the difference after the prefix's last EOS."""
    name = tool_messages[0].get("name", "tool")
    dummy = [
        {"role": "user", "content": "dummy"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {}}}],
        },
    ]
    options = {"tokenize": True, "return_dict": False, "chat_template": template}
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **options)
    full = tokenizer.apply_chat_template(dummy + list(tool_messages), add_generation_prompt=True, **options)
    ends = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template's tool suffix is not prefix-preserving")
    return list(full[len(prefix) :])


def trl_rollout_ids(
    tokenizer: Any, conversation: Sequence[Mapping[str, Any]], tools: Sequence[Any], template: str
) -> tuple[list[int], list[int]]:
    """A conversation as TRL's token ids for one rollout, and the mask of the ids the model wrote.

    The prompt is the messages up to the first assistant turn with the generation prompt; each assistant turn is
    its text plus EOS (what generation produces, mask 1); each run of tool answers is TRL's suffix (mask 0).

    Returns:
        ``(ids, mask)``, equal lengths.
    """
    first = next(i for i, m in enumerate(conversation) if m.get("role") == "assistant")
    ids = list(
        tokenizer.apply_chat_template(
            list(conversation[:first]),
            tools=list(tools),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            chat_template=template,
        )
    )
    mask = [0] * len(ids)
    index = first
    while index < len(conversation):
        turn = tokenizer(_turn_text(conversation[index]), add_special_tokens=False)["input_ids"]
        turn = [*turn, tokenizer.eos_token_id]
        ids += turn
        mask += [1] * len(turn)
        index += 1
        answers = []
        while index < len(conversation) and conversation[index].get("role") == "tool":
            answers.append(conversation[index])
            index += 1
        if answers:
            suffix = _tool_suffix_ids(tokenizer, answers, template)
            ids += suffix
            mask += [0] * len(suffix)
    return ids, mask


def warm_batch(chosen: Sequence[tuple[list[int], list[int]]], pad: int) -> tuple[Any, Any, Any]:
    """A padded supervised batch of (token ids, model-turn mask) pairs: ``input_ids``, ``attention_mask`` and
    ``labels`` (the ids where the mask is 1, else -100), each ``[B, L]``."""
    import torch

    width = max(len(ids) for ids, _ in chosen)
    inputs = torch.full((len(chosen), width), pad, dtype=torch.long)  # [B, L]
    labels = torch.full((len(chosen), width), -100, dtype=torch.long)  # [B, L]
    attention = torch.zeros((len(chosen), width), dtype=torch.long)  # [B, L]
    for row, (ids, mask) in enumerate(chosen):
        inputs[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.where(torch.tensor(mask) == 1, torch.tensor(ids), -100)
    return inputs, attention, labels


def _warm_start(model: Any, batches: list[tuple[list[int], list[int]]], pad: int, warm: WarmStart, seed: int) -> float:
    """Supervised steps on the model's turns; returns the last step's loss."""
    import torch

    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=warm.learning_rate)
    model.train()
    loss_value = float("nan")
    with phase("warm start", warm.steps, "steps") as advance:
        for _ in range(warm.steps):
            chosen = [batches[rng.randrange(len(batches))] for _ in range(warm.batch_size)]
            inputs, attention, labels = warm_batch(chosen, pad)
            loss = model(input_ids=inputs, attention_mask=attention, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            loss_value = float(loss.detach())
            advance(1)
    model.eval()
    return loss_value


def build_tiny_agent_model(
    folder: str | Path,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    tools: Sequence[Callable[..., Any]],
    config: Mapping[str, Any] | None = None,
    warm_start: WarmStart | None = None,
    seed: int = 0,
) -> Path:
    """Write a tiny tool-calling Llama, its chat tokenizer and (with ``warm_start``) its warm-started weights.

    Args:
        folder: where to save; ``from_pretrained(folder)`` loads it back.
        conversations: demonstrations as chat messages (system, user, then assistant turns and tool answers), e.g.
            ``whileai.simulations.environment.environment_conversation`` of the seeded agent.
        tools: the tools TRL will offer (the environment's bound methods), in TRL's order.
        config: ``LlamaConfig`` values over ``TINY_DEFAULTS``.
        warm_start: the supervised steps on ``conversations``; None leaves the weights random.
        seed: the seed of the weights and of the warm start's batches.

    Returns:
        ``folder``; ``folder/warm_start.json`` records the steps and the last loss.
    """
    with needs_extra("train", "a tiny model"):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

    template = _qwen_template()
    tokenizer = train_chat_tokenizer(conversations, tools)
    encoded = [trl_rollout_ids(tokenizer, c, tools, template) for c in conversations]
    longest = max(len(ids) for ids, _ in encoded)
    values = {**TINY_DEFAULTS, "max_position_embeddings": max(1024, 2 * longest), **(config or {})}
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **values,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    record: dict[str, Any] = {"conversations": len(conversations), "longest_rollout_tokens": longest}
    if warm_start is not None and warm_start.steps > 0:
        loss = _warm_start(model, encoded, tokenizer.pad_token_id, warm_start, seed)
        record.update(steps=warm_start.steps, batch_size=warm_start.batch_size, final_loss=round(loss, 4))
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    (target / "warm_start.json").write_text(json.dumps(record, indent=2) + "\n")
    return target


def agent_model_key(
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    tools: Sequence[Callable[..., Any]],
    config: Mapping[str, Any] | None,
    warm_start: WarmStart | None,
    seed: int,
) -> str:
    """What ``build_tiny_agent_model`` makes from these arguments, as a name: a hash of them, of the libraries'
    versions and of this module's source (a change to how the model is built makes a new name)."""
    import tokenizers
    import torch
    import transformers

    import whileai

    described = [(tool.__name__, str(inspect.signature(tool)), tool.__doc__) for tool in tools]
    payload = {
        "conversations": conversations,
        "tools": described,
        "config": dict(config or {}),
        "warm_start": None if warm_start is None else dataclasses.astuple(warm_start),
        "seed": seed,
        "versions": [whileai.__version__, torch.__version__, transformers.__version__, tokenizers.__version__],
        "source": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def from_cache(folder: str | Path, key: str, cache: Path) -> bool:
    """Copy the model ``key`` names from ``cache`` into ``folder``; False when the cache does not hold it."""
    kept = cache / key
    if not (kept / "warm_start.json").is_file():  # written last: a folder without it is not whole
        return False
    shutil.copytree(kept, folder, dirs_exist_ok=True)
    return True


def to_cache(folder: str | Path, key: str, cache: Path) -> None:
    """Keep a copy of the model in ``folder`` in ``cache`` under ``key``. Copied beside it, then renamed into place,
    so that a run reading the cache at the same time finds the whole model or none; where another run put it there
    first, this copy is dropped. A cache that cannot be written is no error: the next run builds again."""
    partial = cache / f".{key}.{os.getpid()}"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, partial, dirs_exist_ok=True)
        os.rename(partial, cache / key)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


@contextmanager
def building(key: str, cache: Path) -> Iterator[None]:
    """Hold the cache's lock on ``key`` for the ``with`` block: of two runs that would build the same model at once
    (two arms started together), the second waits for the first and copies its model. Without a cache that can be
    written, no lock: each builds its own."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        handle = open(cache / f".{key}.lock", "a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_recipe_model(path: str, model: Any, task: Any, seed: int, say: Callable[[str], None]) -> None:
    """Build a recipe's tiny random-weight model (``model``: its model section) for ``task`` (a
    ``whileai.tasks.load.TrainingTask``): word-level for a text task, a warm-started tool caller for a multi-turn
    one, copied from the cache where a run with the same task, settings and seed left one."""
    from whileai.defaults import cache_dir

    if task.environment_factory is None:
        build_tiny_model(path, task.corpus, model.tiny.config(), seed=seed, chat=task.chat)
        return
    from whileai.simulations.environment import environment_tools

    warm = model.warm_start
    started = time.perf_counter()
    # Without a warm start the demonstrations still train the tokenizer (two per scenario are plenty for that).
    conversations = task.demonstrations(warm.rollouts if warm is not None else 2, seed)
    tools = environment_tools(task.environment_factory())
    plan = None if warm is None else WarmStart(warm.steps, warm.batch_size, warm.learning_rate)
    key, cache = agent_model_key(conversations, tools, model.tiny.config(), plan, seed), cache_dir("tiny")
    with building(key, cache):
        if from_cache(path, key, cache):
            say(f"whileai: the tiny model from {cache / key}, left by a run with the same task, settings and seed")
            return
        build_tiny_agent_model(path, conversations, tools, model.tiny.config(), plan, seed=seed)
        to_cache(path, key, cache)
    if plan is not None and plan.steps > 0:
        record = json.loads((Path(path) / "warm_start.json").read_text())
        say(
            f"whileai: warm start: {warm.steps} supervised steps on {len(conversations)} seeded-agent conversations, "
            f"final loss {record['final_loss']} ({time.perf_counter() - started:.0f} s)"
        )
