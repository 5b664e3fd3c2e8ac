"""The TD identity of 7.2 on a tabular MDP (whileai.advantages.mdp): averaged sampled TD errors match the exact
advantages within Monte Carlo noise, and GAE with the exact critic is unbiased at every lambda."""

from __future__ import annotations

import torch

from whileai.advantages import exact_values, gae_advantages, random_mdp, sample_steps, softmax_policy, td_errors


def _per_pair_means(estimates, episodes, n_actions):
    """Mean, standard error and count of an estimate per visited (state, action) pair."""
    pair = (episodes.states * n_actions + episodes.actions)[episodes.mask]  # [M]
    x = estimates[episodes.mask]  # [M]
    size = int(pair.max()) + 1
    count = torch.zeros(size, dtype=torch.float64).index_add_(0, pair, torch.ones_like(x))
    total = torch.zeros(size, dtype=torch.float64).index_add_(0, pair, x)
    square = torch.zeros(size, dtype=torch.float64).index_add_(0, pair, x * x)
    mean = total / count.clamp(min=1)
    var = (square / count.clamp(min=1) - mean**2).clamp(min=0)
    return mean, (var / count.clamp(min=1)).sqrt(), count


def test_exact_values_are_consistent():
    mdp = random_mdp(seed=3)
    logits = torch.randn(mdp.n_states, mdp.n_actions, generator=torch.Generator().manual_seed(0))
    v, q, a = exact_values(mdp, logits)
    pi = softmax_policy(logits)
    assert torch.allclose((pi * q).sum(1), v, atol=1e-12)  # V = E_pi[Q]
    assert torch.allclose((pi * a).sum(1)[~mdp.terminal], torch.zeros(mdp.n_states - 2, dtype=torch.float64))
    assert torch.equal(v[mdp.terminal], torch.zeros(2, dtype=torch.float64))


def test_td_identity_on_tabular_mdp():
    mdp = random_mdp(n_states=5, n_actions=3, step_cost=0.05, end_prob=0.35, seed=1)
    logits = torch.randn(mdp.n_states, mdp.n_actions, generator=torch.Generator().manual_seed(2))
    v, _, a = exact_values(mdp, logits)
    episodes = sample_steps(mdp, logits, episodes=30_000, max_steps=60, generator=torch.Generator().manual_seed(3))
    assert not episodes.mask[:, -1].any()  # no truncation at this horizon
    values = v[episodes.states]  # [B, T], the exact critic on the visited states
    delta = td_errors(episodes.rewards, values, episodes.mask)
    mean, stderr, count = _per_pair_means(delta, episodes, mdp.n_actions)
    visited = count > 500
    assert visited.sum() >= 10
    exact = a.reshape(-1)[: mean.shape[0]]
    error = (mean - exact)[visited].abs()
    assert (error <= 5 * stderr[visited] + 1e-3).all(), (error.max(), stderr[visited].max())
    assert error.max() < 0.02
    # GAE with an exact critic is unbiased at every lambda; lambda = 0 has the smallest variance (7.2, 7.3).
    variances = []
    for lam in (0.0, 0.5, 1.0):
        adv, _ = gae_advantages(episodes.rewards, values, episodes.mask, 1.0, lam)
        mean_l, stderr_l, _ = _per_pair_means(adv, episodes, mdp.n_actions)
        assert ((mean_l - exact)[visited].abs() <= 5 * stderr_l[visited] + 1e-3).all()
        variances.append(adv[episodes.mask].var().item())
    assert variances[0] < variances[1] < variances[2]


def test_sample_steps_layout():
    mdp = random_mdp()
    episodes = sample_steps(
        mdp, torch.zeros(7, 3), episodes=64, max_steps=40, generator=torch.Generator().manual_seed(0)
    )
    lengths = episodes.mask.sum(1)
    assert (lengths >= 1).all()
    # The mask is a prefix of ones, and every step ends in a terminal state exactly at the episode's end.
    assert torch.equal(episodes.mask, torch.arange(40)[None] < lengths[:, None])
    last = episodes.next_states[torch.arange(64), lengths - 1]
    assert mdp.terminal[last].all()
    assert (episodes.rewards[~episodes.mask] == 0).all()
