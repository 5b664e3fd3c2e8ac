"""The spread gate's most honest rows: groups the initial policy itself writes, before the first step.

``sample_groups`` takes a few training prompts, generates ``num_generations`` completions for each with the model the
run starts from (plain ``generate`` with sampling, as TRL's transformers backend does; no vLLM), scores them with the
recipe's verifier called the way TRL calls it (``prompts``, ``completions``, ``completion_ids`` and every dataset
column), and returns them as the groups ``GroupwiseGrading.check_spread_groups`` grades. A grader that cannot tell
these passes apart will not tell apart the ones training shows it.

Single-turn tasks only: a multi-turn task (TRL's ``environment_factory``) needs the tool loop, so its gate samples
with the ``simulate`` section instead. Imports torch and transformers inside the function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from whileai.errors import MissingExtra
from whileai.grading.text import completion_text, prompt_text

__all__ = ["sample_groups"]


def sample_groups(
    model_path: str,
    rows: Sequence[dict[str, Any]],
    verifier: Callable[..., Sequence[float]],
    *,
    num_generations: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
) -> list[tuple[str, list[tuple[float, str, str]]]]:
    """``num_generations`` sampled completions per row, scored by ``verifier``, as ``(task, [(reward, prompt,
    completion), ...])`` groups.

    Args:
        model_path: the model folder (or id) the run starts from.
        rows: training rows with a ``prompt`` (text, or chat messages) and any columns the verifier reads.
        verifier: a TRL-style reward function.
        num_generations: completions per prompt (the group size G).
        max_new_tokens: the completion length limit (TRL's ``max_completion_length``).
        temperature: the sampling temperature.
        seed: torch's seed for the sampling.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise MissingExtra(err.name or "torch", "train", "sampling the spread gate's rows") from None

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    model.eval()
    eos = tokenizer.eos_token_id
    torch.manual_seed(seed)
    groups = []
    for index, row in enumerate(rows):
        prompt = row["prompt"]
        chat = not isinstance(prompt, str)
        if chat:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        else:
            ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        inputs = torch.tensor([ids])  # [1, P]
        with torch.no_grad():
            output = model.generate(
                inputs,
                attention_mask=torch.ones_like(inputs),
                do_sample=True,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                num_return_sequences=num_generations,
                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
            )  # [G, P + L]
        completion_ids = []
        for sequence in output[:, len(ids) :].tolist():
            cut = sequence.index(eos) + 1 if eos in sequence else len(sequence)  # up to and with EOS, as TRL keeps
            completion_ids.append(sequence[:cut])
        texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
        columns = {k: [v] * num_generations for k, v in row.items() if k not in ("prompt", "completion")}
        rewards = verifier(
            prompts=[prompt] * num_generations, completions=completions, completion_ids=completion_ids, **columns
        )
        task = str(row.get("task_id", row.get("scenario_id", f"prompt-{index}")))
        shown = prompt_text(prompt)
        scored = [
            (math.nan if r is None else float(r), shown, completion_text(c))
            for r, c in zip(rewards, completions, strict=True)
        ]
        groups.append((task, scored))
    return groups
