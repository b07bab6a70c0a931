"""PPO losses: clipping, dual clip, value clip ratio, explained variance."""

import torch

from rlinf_core.rl.algorithms.losses import explained_variance, ppo_actor_loss, ppo_critic_loss


def test_actor_loss_reference_and_stats():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(64, generator=g) * 0.3
    old = torch.randn(64, generator=g) * 0.3
    adv = torch.randn(64, generator=g)
    mask = torch.rand(64, generator=g) < 0.8
    loss, stats = ppo_actor_loss(logp, old, adv, mask, 0.2, 0.28, clip_ratio_c=3.0)
    ratio = torch.exp(logp - old)
    ref = []
    for r, a, m in zip(ratio.tolist(), adv.tolist(), mask.tolist()):
        if not m:
            continue
        term = max(-a * r, -a * min(max(r, 0.8), 1.28))
        if a < 0:
            term = min(term, 3.0 * abs(a))
        ref.append(term)
    torch.testing.assert_close(loss, torch.tensor(sum(ref) / len(ref)))
    clipped = torch.clamp(ratio, 0.8, 1.28)
    frac = ((-adv * clipped > -adv * ratio) & mask).sum() / mask.sum()
    torch.testing.assert_close(stats["clip_fraction"], frac)
    assert stats["approx_kl"] >= 0


def test_dual_clip_caps_negative_advantage_loss():
    logp, old = torch.tensor([3.0]), torch.tensor([0.0])  # ratio e^3 ≈ 20
    adv = torch.tensor([-1.0])
    loss, stats = ppo_actor_loss(logp, old, adv, torch.ones(1), 0.2, 0.2, clip_ratio_c=3.0)
    assert loss.item() == 3.0 and stats["dual_clip_fraction"] == 1.0


def test_value_clip_ratio_counts_really_clipped_masked_entries():
    old = torch.zeros(4)
    values = torch.tensor([1.0, 0.1, 1.0, -1.0])
    returns = torch.tensor([0.0, 0.0, 2.0, 5.0])
    mask = torch.tensor([True, True, True, False])
    _, stats = ppo_critic_loss(values, old, returns, mask, value_clip=0.2, huber_delta=None)
    # entry 0: V moved away from R=0 past the clip: clipped error 0.2 < 1.0 -> unclipped active
    # entry 1: inside the clip range -> not clipped
    # entry 2: V=1 towards R=2, clipped to 0.2: error 1.8 > 1.0 -> clipped term active
    # entry 3: masked out
    torch.testing.assert_close(stats["value_clip_ratio"], torch.tensor(1 / 3))


def test_explained_variance():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(r, r, torch.ones(4)).item() == 1.0
    assert abs(explained_variance(torch.full((4,), 2.5), r, torch.ones(4)).item()) < 1e-6
