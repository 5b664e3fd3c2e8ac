"""A tiny causal LM with random weights and a locally trained tokenizer, for training on a CPU with no download.

``build_tiny_model`` writes a model folder (config, random weights, tokenizer) that TRL loads by path, the way it
loads any model (TRL's colocate mode reloads the model by name, so an in-memory model is saved first). The tokenizer
is a word-level tokenizer trained with ``tokenizers`` on the task's own text, so every word of the task is one token.

Imports torch, transformers and tokenizers inside the functions: ``import whileai.training.tiny`` is light.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from whileai.errors import MissingExtra

__all__ = ["SPECIAL_TOKENS", "build_tiny_model", "train_tokenizer"]

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
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    except ImportError as err:
        raise MissingExtra(err.name or "transformers", "train", "a tiny model's tokenizer") from None

    tokenizer = Tokenizer(models.WordLevel(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS.values()), min_frequency=1)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    from tokenizers import decoders

    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)
    fast.padding_side = "left"
    return fast


def build_tiny_model(
    folder: str | Path, texts: Iterable[str], config: Mapping[str, Any] | None = None, seed: int = 0
) -> Path:
    """Write a random-weight Llama and its tokenizer (trained on ``texts``) to ``folder``; return the folder.

    Args:
        folder: where to save; ``from_pretrained(folder)`` loads it back.
        texts: the task's text (prompts and the words completions may use).
        config: ``LlamaConfig`` values over ``TINY_DEFAULTS``.
        seed: the seed of the random weights.
    """
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as err:
        raise MissingExtra(err.name or "torch", "train", "a tiny model") from None

    tokenizer = train_tokenizer(texts)
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
