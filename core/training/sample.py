"""The spread gate's most honest rows: groups the initial policy itself writes, before the first step.

``sample_groups`` takes a few training prompts, generates ``num_generations`` completions for each with the model the
run starts from, scores them with the recipe's verifier called the way TRL calls it (``prompts``, ``completions``,
``completion_ids`` and every dataset column), and returns them as the groups ``GroupwiseGrading.check_spread_groups``
grades. A grader that cannot tell these passes apart will not tell apart the ones training shows it.

It samples as TRL 1.16's transformers path does (``GRPOTrainer.__init__`` builds the ``GenerationConfig``,
``_tokenize_prompts`` and ``_generate_single_turn`` use it), from the same ``GRPOConfig``: the length limit,
temperature, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, ``cache_implementation`` and
``generation_kwargs``; every end-of-sequence id the model declares; the prompt through the chat template with
``chat_template_kwargs`` (or the tokenizer's special tokens for text); the completion cut after its first EOS.
``generation_config`` is that configuration, and a test compares it with the one TRL builds.

Single-turn tasks only: a multi-turn task (TRL's ``environment_factory``) needs the tool loop, so its gate samples
with the ``simulate`` section instead. Imports torch and transformers inside the functions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from whileai.defaults import VERIFIER_TIMEOUT_S
from whileai.errors import BadInput, needs_extra
from whileai.isolation import RemoteTraceback
from whileai.progress import phase
from whileai.rows.rewards import verifier_reward
from whileai.rows.text import completion_text, prompt_text
from whileai.rows.verdicts import VerifierFailures, verifier_rewards
from whileai.stats import ClusteredRate, clustered_interval

_log = logging.getLogger("whileai.verifier")

__all__ = ["end_of_sequence_ids", "generation_config", "group_passes", "sample_groups", "sampled_pass_rate"]


def end_of_sequence_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a completion: the model's generation config's, with the tokenizer's first (as TRL)."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return ids


def generation_config(args: Any, model: Any, tokenizer: Any) -> Any:
    """The ``GenerationConfig`` TRL's transformers path samples with, from a ``GRPOConfig``."""
    from transformers import GenerationConfig

    settings = {
        "max_new_tokens": args.max_completion_length,
        "do_sample": True,
        "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": end_of_sequence_ids(model, tokenizer),
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "min_p": args.min_p,
        "repetition_penalty": args.repetition_penalty,
        "cache_implementation": args.cache_implementation,
    }
    settings.update(args.generation_kwargs or {})
    return GenerationConfig(**settings, disable_compile=True)


def _prompt_ids(tokenizer: Any, prompt: Any, chat_template_kwargs: dict[str, Any]) -> list[int]:
    """The prompt's token ids as TRL tokenizes a single-turn prompt without tools."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    tokenized = tokenizer.apply_chat_template(
        conversation=[prompt], add_generation_prompt=True, tokenize=True, return_dict=True, **chat_template_kwargs
    )
    return list(tokenized["input_ids"][0])


def sample_groups(
    model_path: str,
    rows: Sequence[dict[str, Any]],
    verifier: Callable[..., Sequence[float]],
    args: Any,
    *,
    seed: int = 0,
    verifier_timeout_s: float | None = VERIFIER_TIMEOUT_S,
) -> list[tuple[str, list[tuple[float, str, str]]]]:
    """``args.num_generations`` sampled completions per row, scored by ``verifier``, as ``(task, [(reward, prompt,
    completion), ...])`` groups.

    Args:
        model_path: the model folder (or id) the run starts from.
        rows: training rows with a ``prompt`` (text, or chat messages) and any columns the verifier reads.
        verifier: a TRL-style reward function.
        args: the run's ``GRPOConfig``: the group size, every generation setting and the model's loading arguments
            (``model_init_kwargs``: the recipe's dtype) come from it, so the gate samples the model that trains.
        seed: torch's seed for the sampling.
        verifier_timeout_s: the verifier's limit on one prompt's group (``verifier.timeout_s``); the first group
            past it ends the sampling (a ``BadInput``).
    """
    with needs_extra("train", "sampling the spread gate's rows"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, **(args.model_init_kwargs or {}))
    model.eval()
    config = generation_config(args, model, tokenizer)
    ends = set(end_of_sequence_ids(model, tokenizer))
    size = args.num_generations
    template_kwargs = dict(args.chat_template_kwargs or {})
    torch.manual_seed(seed)
    groups = []
    failures = VerifierFailures(_log.warning, verifier)
    with phase("sampling the spread gate's groups", len(rows), "groups") as advance:
        for index, row in enumerate(rows):
            prompt = row["prompt"]
            ids = _prompt_ids(tokenizer, prompt, template_kwargs)
            inputs = torch.tensor([ids] * size)  # [G, P]: one row per completion, as TRL repeats each prompt
            with torch.no_grad():
                output = model.generate(
                    inputs, attention_mask=torch.ones_like(inputs), generation_config=config
                )  # [G, P+L]
            completion_ids = []
            for sequence in output[:, len(ids) :].tolist():
                cut = next((i + 1 for i, token in enumerate(sequence) if token in ends), len(sequence))  # EOS kept
                completion_ids.append(sequence[:cut])
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            chat = not isinstance(prompt, str)
            completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
            columns = {k: [v] * size for k, v in row.items() if k not in ("prompt", "completion")}
            keywords = {"completion_ids": completion_ids, **columns}
            began = time.monotonic()
            rewards = verifier_rewards(verifier, [prompt] * size, completions, keywords, failures, verifier_timeout_s)
            late = verifier_timeout_s is not None and time.monotonic() - began >= verifier_timeout_s
            if late and all(r != r for r in rewards):  # killed at its limit: no reward came
                # One limit for the whole sampling: a verifier that hangs is refused after it, not after each group.
                raise BadInput(
                    f"the verifier ran past verifier.timeout_s ({verifier_timeout_s:g} s) on sampled group {index + 1} "
                    f"of {len(rows)}, so sampling stops: {failures.first or 'no answer'}. Fix it, or raise "
                    "verifier.timeout_s if a batch of yours takes that long"
                )
            task = str(row.get("task_id", row.get("scenario_id", f"prompt-{index}")))
            shown = prompt_text(prompt)
            groups.append((task, [(r, shown, completion_text(c)) for r, c in zip(rewards, completions, strict=True)]))
            advance(1)
    if rows and failures.count == len(rows) * size:  # never one reward: the function is broken, not flaky
        raise BadInput(
            f"the verifier gave no reward for any of the {failures.count} completions sampled; the first: "
            f"{failures.first}. TRL calls it the same way in training (whileai validate checks its signature)"
        ) from (RemoteTraceback(failures.trace) if failures.trace else None)  # the user's, for whileai --debug
    return groups


def group_passes(groups: Sequence[tuple[str, Sequence[tuple[float, str, str]]]]) -> list[tuple[int, int]]:
    """``(passes, completions)`` of each group ``sample_groups`` returns: a pass is a reward above 0 (a ±1 verifier's
    -1 fails, an unscorable NaN is no pass)."""
    return [(sum(verifier_reward(r) > 0 for r, _, _ in members), len(members)) for _, members in groups]


def sampled_pass_rate(groups: Sequence[tuple[str, Sequence[tuple[float, str, str]]]]) -> tuple[dict[str, Any], str]:
    """The pass rate of sampled groups as figures (``whileai.stats.ClusteredRate.as_dict`` and ``mixed``, the groups
    with some passes and some failures: the groups a grader grades) and as one line.

    Example:
        >>> figures, line = sampled_pass_rate([("a", [(1.0, "p", "x"), (0.0, "p", "y")]),
        ...                                    ("b", [(0.0, "p", "z"), (-1.0, "p", "w")])])
        >>> figures["passes"], figures["mixed"]
        (1, 1)
        >>> line
        'pass rate 0.25 (95% CI 0.00 to 0.99, 1 of 4 completions, prompts as clusters); 1 of 2 groups mixed'
    """
    counts = group_passes(groups)
    rate: ClusteredRate = clustered_interval(counts)
    mixed = sum(0 < y < m for y, m in counts)
    line = (
        f"pass rate {rate.rate:.2f} (95% CI {rate.low:.2f} to {rate.high:.2f}, {rate.passes} of {rate.n} "
        f"completions, prompts as clusters); {mixed} of {len(counts)} groups mixed"
    )
    return {**rate.as_dict(), "mixed": mixed}, line
