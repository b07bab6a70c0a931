"""Loss aggregation: ``trajectory_mean`` against RLinf's ``masked_mean_ratio`` (written out from upstream)."""

import pytest
import torch

from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.policy import EvaluateOutput
from rlinf_core.distributed.reduce import Reducer
from rlinf_core.rl.algorithms.base import trajectory_weights
from rlinf_core.rl.algorithms.grpo import GRPO
from rlinf_core.rl.algorithms.ppo import PPO
from rlinf_core.rl.data.micro_batch import Denominators, MicroBatch
from rlinf_core.rl.data.trajectory import Trajectory
from rlinf_core.testing.numerics import reorder_rtol

pytestmark = pytest.mark.numeric  # scripts/test_cpu_kernels.sh: float results depend on the CPU's kernels

N, B, C, D, G = 4, 6, 2, 3, 2
LENGTHS = [8, 3, 5, 8, 2, 6]  # sub-steps until (and including) the step that ended each episode
# a loss against its reference: masked means of the same N·B·C·D = 144 entries of size <= 2, summed in other
# orders and groupings (two levels: per trajectory, then over them)
ATOL = reorder_rtol(N * B * C * D, 2) * 2
SUCCESS = [0, 1, 1, 0, 1, 1]  # slot 0/1: mixed group; 2/3: mixed; 4/5: all success (filtered at [0.5, 4.5])


def _trajectory(with_values: bool = False) -> Trajectory:
    t = torch.arange(N * C).view(N, C, 1).permute(0, 2, 1)  # sub-step index [N, 1, C]
    lengths = torch.tensor(LENGTHS).view(1, B, 1)
    valid = t < lengths
    last = t == lengths - 1
    rewards = (last & torch.tensor(SUCCESS, dtype=torch.bool).view(1, B, 1)).float() * 5.0
    g = torch.Generator().manual_seed(0)
    obs = [Observation(torch.zeros(B, 2, 2, 3, dtype=torch.uint8), ["task"] * B) for _ in range(N)]
    return Trajectory(
        obs=obs,
        records=[{"action_tokens": torch.zeros(B, C, D, dtype=torch.long)} for _ in range(N)],
        logprobs=-torch.rand(N, B, C, D, generator=g),
        values=torch.randn(N + 1, B, 1, generator=g) if with_values else None,
        rewards=rewards,
        terminations=last & valid,
        truncations=torch.zeros(N, B, C, dtype=torch.bool),
        valid=valid,
        bootstrap_values=torch.zeros(N, B, C),
        reset_state_ids=torch.arange(B // G).repeat_interleave(G).view(1, B).expand(N, B),
    )


def _whole(samples, policy_denominator: float, value_denominator: float | None = None) -> MicroBatch:
    """All of ``samples`` as one micro-batch that is its own minibatch, with these loss denominators."""
    n = len(samples)
    denominators = Denominators(policy_denominator, value_denominator)
    return MicroBatch(samples, torch.arange(n), 0, 0, 0, n, denominators, last=True, last_of_step=True)


def _upstream_masked_mean_ratio(loss_entries, dones, filter_mask, T):
    """RLinf v0.3: compute_loss_mask → filter → masked_mean_ratio, for token-level log-probs.

    ``loss_entries [N·B, C, D]``, ``dones [N + 1, B, C]`` (row 0: reset; row k+1: dones of chunk step k).
    """
    n_chunk_step, bsz = dones.shape[0] - 1, dones.shape[1]
    flat = dones.transpose(1, 2).reshape(-1, bsz)[-(n_chunk_step * C + 1) :]
    loss_mask = (flat.cumsum(0) == 0)[:-1].reshape(n_chunk_step, C, bsz).transpose(1, 2)
    loss_mask_sum = loss_mask.sum(dim=(0, 2), keepdim=True).expand_as(loss_mask)
    loss_mask = loss_mask & filter_mask.view(1, bsz, 1)
    mask = loss_mask.reshape(-1, C).unsqueeze(-1)  # token level: [S, C, 1] broadcast over D
    ratio = loss_mask_sum.reshape(-1, C).unsqueeze(-1) * 1.0 / T
    return (loss_entries / ratio * mask).mean()


def _clipped_loss(logp, old, adv, low=0.2, high=0.28, c=3.0):
    ratio = torch.exp(logp - old)
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - low, 1 + high))
    return torch.where(adv < 0, torch.minimum(loss, c * adv.abs()), loss)


def test_trajectory_mean_matches_rlinf_masked_mean_ratio():
    traj = _trajectory()
    algo = GRPO(filter_rewards=True, rewards_lower_bound=0.5, rewards_upper_bound=4.5, loss_agg="trajectory_mean")
    T = 16
    samples, metrics = algo.compute([traj], G, Reducer(), max_episode_steps=T)
    assert metrics["rollout/kept_groups_fraction"] == 2 / 3  # the last of three groups is filtered out
    noise = torch.randn(samples.old_logprobs.shape, generator=torch.Generator().manual_seed(1))
    logp = samples.old_logprobs + 0.3 * noise
    out = EvaluateOutput(logprobs=logp.clone().requires_grad_(True))
    loss, _ = algo.loss(out, _whole(samples, float(algo.denominator(samples.mask))))

    dones = torch.zeros(N * C + 1, B, dtype=torch.bool)
    for b, L in enumerate(LENGTHS):
        dones[L, b] = True
    dones = dones[1:].view(N, C, B).transpose(1, 2)
    dones = torch.cat([torch.zeros(1, B, C, dtype=torch.bool), dones])
    kept = torch.tensor([True, True, True, True, False, False])
    entries = _clipped_loss(logp, samples.old_logprobs, samples.adv.unsqueeze(-1).expand_as(logp))
    reference = _upstream_masked_mean_ratio(entries, dones, kept, T)
    assert torch.allclose(loss, reference, rtol=0, atol=ATOL), (loss.item(), reference.item())

    # each trajectory counts equally: the gradient mass per kept trajectory is its mean over its own steps
    loss.backward()
    per_traj = out.logprobs.grad.view(N, B, C, D).abs().sum((0, 2, 3))
    assert per_traj[4:].eq(0).all()  # filtered group


def test_step_mean_weights_every_valid_step_equally():
    traj = _trajectory()
    algo = GRPO(filter_rewards=False, loss_agg="step_mean")
    samples, _ = algo.compute([traj], G, Reducer())
    assert samples.loss_weight is None
    logp = samples.old_logprobs + 0.1
    loss, _ = algo.loss(EvaluateOutput(logprobs=logp), _whole(samples, float(algo.denominator(samples.mask))))
    entries = _clipped_loss(logp, samples.old_logprobs, samples.adv.unsqueeze(-1).expand_as(logp))
    m = samples.mask.unsqueeze(-1).expand_as(entries)
    assert torch.allclose(loss, (entries * m).sum() / m.sum(), rtol=0, atol=ATOL)


def test_trajectory_weights_and_ppo_critic():
    traj = _trajectory(with_values=True)
    w = trajectory_weights(traj, max_episode_steps=8)
    assert torch.allclose(w[0], 8.0 / torch.tensor(LENGTHS, dtype=torch.float32))
    algo = PPO(loss_agg="trajectory_mean")
    samples, _ = algo.compute([traj], 1, Reducer(), max_episode_steps=8)
    values = samples.old_values + 0.5
    out = EvaluateOutput(logprobs=samples.old_logprobs.clone(), values=values)
    denom = float(algo.denominator(samples.mask))
    vdenom = float(algo.denominator(samples.value_mask))
    _, metrics = algo.loss(out, _whole(samples, denom, vdenom))
    from rlinf_core.rl.algorithms.losses import huber

    per = torch.maximum(
        huber(samples.value_targets - values, 10.0),
        huber(samples.value_targets - (samples.old_values + 0.2), 10.0),
    )
    ratio = torch.tensor(LENGTHS, dtype=torch.float32).repeat(N).view(-1, 1) / 8.0
    expected = (per / ratio * samples.value_mask).mean()
    assert torch.allclose(metrics["train/critic/value_loss"], expected, rtol=0, atol=ATOL)


def test_bad_loss_agg_is_rejected():
    with pytest.raises(ValueError, match="loss_agg"):
        GRPO(loss_agg="token-mean")
