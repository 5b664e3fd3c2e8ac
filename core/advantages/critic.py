"""A value model for token-level GAE: build it from a causal LM, read its values, fit it, judge it (section 7.4).

- ``make_critic``: a deep copy of a transformers causal LM whose output layer has one unit instead of the vocabulary.
- ``critic_values``: the critic's values aligned with the predicted positions, the layout of shifted log-probs.
- ``fit_critic``: a small masked-MSE regression loop on value targets (``gae_advantages``' second output, or returns).
- ``explained_variance``: the standard diagnostic, the fraction of the targets' variance the predictions remove.

transformers is imported inside the functions that need it; this module never downloads anything and knows no
tokenizer. It is a small training loop for experiments and tests, not a distributed PPO critic trainer.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["critic_values", "explained_variance", "fit_critic", "make_critic"]


def explained_variance(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``1 - Var(target - pred) / Var(target)`` over the selected entries (section 7.4).

    A critic that predicts the mean scores 0, a perfect one 1, a harmful one below 0. Both variances are population
    variances over the same entries, so the normalization cancels.

    Args:
        pred: any shape, e.g. ``[B, T]`` values.
        target: same shape, e.g. value targets.
        mask: same shape (bool or numeric) or ``None`` for every entry.

    Returns:
        0-dim tensor in float32 (float64 for float64 inputs); NaN when the targets do not vary.

    Example:
        >>> explained_variance(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 4.0]))
        tensor(0.8571)
    """
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape")
    work = torch.float64 if torch.float64 in (pred.dtype, target.dtype) else torch.float32
    p, t = pred.to(work), target.to(work)
    if mask is not None:
        keep = mask != 0
        p, t = p[keep], t[keep]  # [M]
    spread = torch.var(t, correction=0)  # []
    ratio = torch.var(t - p, correction=0) / spread  # []
    return torch.where(spread > 0, 1 - ratio, torch.full_like(ratio, float("nan")))


def make_critic(causal_lm: Any) -> Any:
    """A deep copy of ``causal_lm`` whose output layer is a fresh ``hidden -> 1`` linear map (a value model).

    The new head starts at zero (weight and bias), so the critic first predicts 0 everywhere: it knows the text but
    has never predicted a scalar (7.7, "initializing the critic"). Word-embedding tying is switched off in the copy
    so that the one-unit head is never re-tied to the input embeddings. The original model is not modified.

    Args:
        causal_lm: a transformers ``PreTrainedModel`` with ``get_output_embeddings`` / ``set_output_embeddings``
            (any ``*ForCausalLM``).

    Returns:
        The critic, on the same device and dtype as the original; its ``logits`` have last dimension 1.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, bos_token_id=0, eos_token_id=0)
        >>> lm = GPT2LMHeadModel(config)
        >>> make_critic(lm).get_output_embeddings().out_features
        1
    """
    critic = copy.deepcopy(causal_lm)
    head = critic.get_output_embeddings()
    if head is None or not hasattr(head, "in_features"):
        raise TypeError(f"{type(causal_lm).__name__} has no linear output layer to replace")
    value_head = torch.nn.Linear(head.in_features, 1, bias=True, device=head.weight.device, dtype=head.weight.dtype)
    torch.nn.init.zeros_(value_head.weight)
    torch.nn.init.zeros_(value_head.bias)
    critic.set_output_embeddings(value_head)
    critic.config.tie_word_embeddings = False
    return critic


def critic_values(critic: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The critic's values aligned with the predicted positions: ``[B, T]`` tokens in, ``[B, T-1]`` values out.

    Column ``j`` is the critic's output at position ``j``, which has seen tokens ``0..j``: the context in which token
    ``j+1`` was chosen, so it is ``V(c_{j+1})`` (section 7.4). This is the layout of shifted log-probs
    (``logprobs[:, j] = log p(input_ids[:, j+1] | input_ids[:, :j+1])``): pair these values with rewards and a
    policy mask over ``input_ids[:, 1:]``, e.g. ``gae_advantages(rewards, values, token_mask[:, 1:])``.

    Args:
        critic: a model from ``make_critic``.
        input_ids: ``[B, T]`` token ids.
        attention_mask: ``[B, T]`` or ``None``.

    Returns:
        ``[B, T-1]`` values in the critic's dtype, differentiable (wrap in ``torch.no_grad()`` to read only).

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, bos_token_id=0, eos_token_id=0)
        >>> critic = make_critic(GPT2LMHeadModel(config))
        >>> critic_values(critic, torch.tensor([[1, 2, 3, 4]])).shape
        torch.Size([1, 3])
    """
    out = critic(input_ids=input_ids, attention_mask=attention_mask)
    return out.logits[:, :-1, 0]  # [B, T-1]


def fit_critic(
    critic: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    targets: torch.Tensor,
    mask: torch.Tensor,
    steps: int = 50,
    lr: float = 1e-3,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
) -> list[float]:
    """Regress the critic's values on ``targets`` at the ``mask`` positions with Adam; returns the loss per step.

    The loss is the mean squared error over the masked entries of each minibatch; targets and values elsewhere are
    never read (NaN or inf there changes neither the loss nor its gradient). Targets are usually the value targets of
    ``gae_advantages`` or Monte Carlo returns, in the layout of ``critic_values``.

    Args:
        critic: a model from ``make_critic``; trained in place (left in the train/eval mode it came in).
        input_ids: ``[B, T]`` token ids.
        attention_mask: ``[B, T]`` or ``None``.
        targets: ``[B, T-1]`` regression targets, aligned like ``critic_values``.
        mask: ``[B, T-1]``, 1 where a target counts (policy positions).
        steps: optimizer steps.
        lr: Adam's learning rate.
        batch_size: rows per step, drawn without replacement each step; ``None`` uses all ``B`` rows.
        generator: random source for the minibatches.

    Returns:
        The minibatch loss before each step, ``steps`` floats.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, bos_token_id=0, eos_token_id=0)
        >>> critic = make_critic(GPT2LMHeadModel(config))
        >>> ids = torch.tensor([[1, 2, 3, 4]])
        >>> losses = fit_critic(critic, ids, None, torch.ones(1, 3), torch.ones(1, 3), steps=30, lr=0.05)
        >>> losses[-1] < losses[0]
        True
    """
    rows = input_ids.shape[0]
    if targets.shape != (rows, input_ids.shape[1] - 1) or mask.shape != targets.shape:
        raise ValueError(
            f"targets and mask must be [B, T-1] = {(rows, input_ids.shape[1] - 1)}, "
            f"got {tuple(targets.shape)} and {tuple(mask.shape)}"
        )
    was_training = critic.training
    critic.train()
    optimizer = torch.optim.Adam([p for p in critic.parameters() if p.requires_grad], lr=lr)
    losses: list[float] = []
    keep = mask != 0  # [B, T-1]
    # Selected with where, never multiplied by the mask: NaN * 0 is NaN, in the loss and in its gradient.
    clean_targets = torch.where(keep, targets.float(), 0.0)  # [B, T-1]
    try:
        for _ in range(steps):
            if batch_size is None or batch_size >= rows:
                pick = slice(None)
            else:
                pick = torch.randperm(rows, generator=generator)[:batch_size].to(input_ids.device)
            values = critic_values(
                critic, input_ids[pick], None if attention_mask is None else attention_mask[pick]
            ).float()  # [b, T-1]
            k = keep[pick]  # [b, T-1]
            error = torch.where(k, values - clean_targets[pick], 0.0)  # [b, T-1]
            loss = error.square().sum() / k.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    finally:
        critic.train(was_training)
    return losses
