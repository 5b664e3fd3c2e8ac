"""A small tabular MDP with exact V, Q and A under a softmax policy, and episodes sampled in the ``[B, T]`` layout.

The chapter checks its estimators where the truth is known (section 7.2): on a tabular MDP ``V^pi`` solves a linear
system, so the TD identity ``E[delta | s, a] = A^pi(s, a)`` can be tested on sampled episodes with the same
``td_errors`` and ``gae_advantages`` that run on token batches. ``sample_steps`` records episodes as
``states, actions, rewards, mask`` tensors ``[B, T]``, the mask 1 while the episode runs.

For tests and docs only: the sampler steps in Python once per time step (vectorized over episodes), which is fine
for the short episodes of a toy MDP; nothing here is meant for training LLMs. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Episodes", "TabularMDP", "exact_values", "random_mdp", "sample_steps", "softmax_policy"]


@dataclass(frozen=True)
class TabularMDP:
    """An episodic MDP on ``S`` states and ``A`` actions, float64 throughout.

    Attributes:
        transitions: ``[S, A, S]``, ``P(s' | s, a)``; rows of terminal states are ignored.
        rewards: ``[S, A, S]``, the reward of the transition ``s --a--> s'``.
        terminal: ``[S]`` bool; an episode ends on entering a terminal state (its value is 0).
        start: ``[S]`` distribution of the first state (zero on terminal states).
        gamma: discount per step, in ``[0, 1]``; with ``gamma = 1`` every policy must terminate.
    """

    transitions: torch.Tensor
    rewards: torch.Tensor
    terminal: torch.Tensor
    start: torch.Tensor
    gamma: float = 1.0

    @property
    def n_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def n_actions(self) -> int:
        return self.transitions.shape[1]


@dataclass(frozen=True)
class Episodes:
    """Sampled episodes in the token-batch layout, each ``[B, T]``.

    Attributes:
        states: int64, the state before each step (0 after the episode ends).
        actions: int64, the action taken (0 after the end).
        rewards: float64, the reward of each step (0 after the end).
        mask: bool, True while the episode runs (one entry per action taken).
        next_states: int64, the state each step led to (0 after the end).
    """

    states: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor
    next_states: torch.Tensor


def random_mdp(
    n_states: int = 5, n_actions: int = 3, step_cost: float = 0.05, end_prob: float = 0.3, seed: int = 0
) -> TabularMDP:
    """A random episodic MDP with ``n_states`` working states and two terminal ones, success and failure.

    Every step costs ``step_cost``; entering the success state pays 1 on top. From each state-action pair, the
    episode ends with probability ``end_prob`` (success or failure, drawn per pair) and otherwise moves to a random
    working state, so episodes last ``1 / end_prob`` steps on average.

    Example:
        >>> mdp = random_mdp(n_states=4, n_actions=2)
        >>> mdp.transitions.shape, bool(mdp.terminal[-1])
        (torch.Size([6, 2, 6]), True)
    """
    rng = torch.Generator().manual_seed(seed)
    total = n_states + 2
    success, failure = n_states, n_states + 1
    # Uniform Dirichlet rows from exponential variates, so that the seed alone fixes the MDP.
    gammas = -torch.log(torch.rand((n_states, n_actions, n_states), generator=rng, dtype=torch.float64))
    moves = gammas / gammas.sum(-1, keepdim=True)  # [S0, A, S0], uniform Dirichlet draws
    win = torch.rand((n_states, n_actions), generator=rng, dtype=torch.float64)  # [S0, A], success share of the end
    transitions = torch.zeros((total, n_actions, total), dtype=torch.float64)
    transitions[:n_states, :, :n_states] = (1 - end_prob) * moves
    transitions[:n_states, :, success] = end_prob * win
    transitions[:n_states, :, failure] = end_prob * (1 - win)
    transitions[n_states:, :, n_states:] = torch.eye(2, dtype=torch.float64)[:, None, :]  # absorbing, never used
    rewards = torch.full((total, n_actions, total), -float(step_cost), dtype=torch.float64)
    rewards[:, :, success] += 1.0
    terminal = torch.zeros(total, dtype=torch.bool)
    terminal[n_states:] = True
    start = torch.zeros(total, dtype=torch.float64)
    start[0] = 1.0
    return TabularMDP(transitions=transitions, rewards=rewards, terminal=terminal, start=start)


def softmax_policy(logits: torch.Tensor) -> torch.Tensor:
    """``pi(a | s)`` from a table of logits: ``[S, A]`` -> ``[S, A]``, float64."""
    return torch.softmax(logits.to(torch.float64), dim=-1)


def exact_values(mdp: TabularMDP, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact ``V^pi [S]``, ``Q^pi [S, A]`` and ``A^pi = Q^pi - V^pi [S, A]`` under the softmax policy of ``logits``.

    Solves ``(I - gamma * P_pi) V = r_pi`` on the working states; terminal states have ``V = 0`` and their ``Q`` and
    ``A`` rows are 0.

    Example:
        >>> mdp = random_mdp()
        >>> v, q, a = exact_values(mdp, torch.zeros(mdp.n_states, mdp.n_actions))
        >>> bool(torch.allclose((softmax_policy(torch.zeros(7, 3)) * a).sum(1), torch.zeros(7, dtype=torch.float64)))
        True
    """
    pi = softmax_policy(logits)  # [S, A]
    live = ~mdp.terminal  # [S]
    expected_reward = (mdp.transitions * mdp.rewards).sum(-1)  # [S, A], E[r | s, a]
    r_pi = (pi * expected_reward).sum(-1)  # [S]
    p_pi = torch.einsum("sa,sat->st", pi, mdp.transitions)  # [S, S]
    p_live = p_pi[live][:, live]  # [S0, S0], transitions between working states
    system = torch.eye(p_live.shape[0], dtype=torch.float64) - mdp.gamma * p_live
    values = torch.zeros(mdp.n_states, dtype=torch.float64)  # [S]
    values[live] = torch.linalg.solve(system, r_pi[live])
    q = expected_reward + mdp.gamma * mdp.transitions @ values  # [S, A]
    q[mdp.terminal] = 0.0
    return values, q, q - values[:, None]


def sample_steps(
    mdp: TabularMDP,
    logits: torch.Tensor,
    episodes: int,
    max_steps: int = 50,
    generator: torch.Generator | None = None,
) -> Episodes:
    """Run ``episodes`` episodes in parallel under the softmax policy and record them as ``[B, T]`` tensors.

    ``T = max_steps``; an episode still running after ``max_steps`` is truncated (its mask simply ends), which biases
    the returns of late states, so pick ``max_steps`` well above the typical length.

    Example:
        >>> mdp = random_mdp()
        >>> rng = torch.Generator().manual_seed(0)
        >>> ep = sample_steps(mdp, torch.zeros(7, 3), episodes=4, max_steps=10, generator=rng)
        >>> ep.states.shape, ep.mask.dtype
        (torch.Size([4, 10]), torch.bool)
    """
    pi = softmax_policy(logits)  # [S, A]
    shape = (episodes, max_steps)
    states = torch.zeros(shape, dtype=torch.int64)
    actions = torch.zeros(shape, dtype=torch.int64)
    next_states = torch.zeros(shape, dtype=torch.int64)
    rewards = torch.zeros(shape, dtype=torch.float64)
    mask = torch.zeros(shape, dtype=torch.bool)
    state = torch.multinomial(mdp.start.expand(episodes, -1), 1, generator=generator).squeeze(1)  # [B]
    running = ~mdp.terminal[state]  # [B]
    for t in range(max_steps):
        if not running.any():
            break
        action = torch.multinomial(pi[state], 1, generator=generator).squeeze(1)  # [B]
        following = torch.multinomial(mdp.transitions[state, action], 1, generator=generator).squeeze(1)  # [B]
        states[:, t] = torch.where(running, state, 0)
        actions[:, t] = torch.where(running, action, 0)
        next_states[:, t] = torch.where(running, following, 0)
        rewards[:, t] = torch.where(running, mdp.rewards[state, action, following], 0.0)
        mask[:, t] = running
        state = torch.where(running, following, state)
        running = running & ~mdp.terminal[state]
    return Episodes(states=states, actions=actions, rewards=rewards, mask=mask, next_states=next_states)
