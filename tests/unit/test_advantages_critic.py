"""Critics (whileai.advantages.critic) on tiny random-weight transformers built from a config: head shape, the
alignment of 7.4, fitting, explained variance. No hub download."""

from __future__ import annotations

import math

import pytest
import torch

from whileai.advantages import critic_values, explained_variance, fit_critic, gae_advantages, make_critic

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and lose a lot to them on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    return transformers.LlamaForCausalLM(config).eval()


def test_make_critic_has_one_output_unit_and_leaves_the_policy_alone():
    lm = tiny_llama()
    before = {k: v.clone() for k, v in lm.state_dict().items()}
    critic = make_critic(lm)
    assert critic.get_output_embeddings().out_features == 1
    assert lm.get_output_embeddings().out_features == 64
    ids = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    assert critic(input_ids=ids).logits.shape == (2, 7, 1)
    assert lm(input_ids=ids).logits.shape == (2, 7, 64)
    for k, v in lm.state_dict().items():
        assert torch.equal(v, before[k])
    # The body was copied, not shared.
    assert critic.model.embed_tokens.weight.data_ptr() != lm.model.embed_tokens.weight.data_ptr()


def test_critic_values_alignment():
    """Column j is the output at position j: it depends on tokens 0..j and on no later token (7.4)."""
    critic = make_critic(tiny_llama())
    torch.nn.init.normal_(critic.get_output_embeddings().weight)  # a non-zero head so the values move
    ids = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        values = critic_values(critic, ids, torch.ones_like(ids))
        assert values.shape == (1, 7)
        full = critic(input_ids=ids).logits[..., 0]
        assert torch.allclose(values, full[:, :-1])
        changed = ids.clone()
        changed[0, 5] = (ids[0, 5] + 1 - 3) % 61 + 3
        moved = critic_values(critic, changed, torch.ones_like(ids))
    assert torch.allclose(values[:, :5], moved[:, :5], atol=1e-6)  # columns before token 5 cannot see it
    assert not torch.allclose(values[:, 5:], moved[:, 5:], atol=1e-6)  # column 5 has seen it


def test_fit_critic_reduces_loss_on_gae_targets():
    critic = make_critic(tiny_llama())
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 64, (8, 12), generator=gen)
    mask = (torch.rand(8, 11, generator=gen) < 0.7).to(torch.float32)  # policy positions of ids[:, 1:]
    rewards = torch.zeros(8, 11)
    rewards[:, -1] = (ids[:, 1] % 2).float()  # an outcome the prefix predicts
    with torch.no_grad():
        values = critic_values(critic, ids)
    _, targets = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    losses = fit_critic(
        critic, ids, torch.ones_like(ids), targets, mask, steps=40, lr=5e-3, batch_size=4, generator=gen
    )
    assert len(losses) == 40
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:5]) / 5
    with torch.no_grad():
        fitted = critic_values(critic, ids)
    assert explained_variance(fitted, targets, mask).item() > 0.3
    assert not critic.training


def test_explained_variance_anchors():
    target = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert explained_variance(target, target, mask).item() == pytest.approx(1.0)
    assert explained_variance(torch.full_like(target, 2.0), target, mask).item() == pytest.approx(0.0)
    assert explained_variance(-target + 4, target, mask).item() < 0
    assert torch.isnan(explained_variance(target, torch.ones_like(target)))


def test_fit_critic_never_reads_targets_off_the_mask():
    """NaN and inf targets at mask-0 positions (tool tokens): the same losses and weights as with targets 0 there."""
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 64, (4, 10), generator=gen)
    mask = torch.rand(4, 9, generator=gen) < 0.6  # [B, T-1]
    targets = torch.randn(4, 9, generator=gen).masked_fill(~mask, 0.0)
    garbage = torch.tensor([float("nan"), float("inf"), float("-inf")])[torch.randint(0, 3, (4, 9), generator=gen)]
    runs = []
    for t in (targets, torch.where(mask, targets, garbage)):
        critic = make_critic(tiny_llama())
        losses = fit_critic(critic, ids, None, t, mask, steps=5, lr=1e-2)
        runs.append((losses, critic.get_output_embeddings().weight.detach().clone()))
    assert all(math.isfinite(loss) for loss in runs[1][0])
    assert runs[1][0] == runs[0][0]
    assert torch.equal(runs[1][1], runs[0][1])
