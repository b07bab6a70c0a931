"""PPO with GAE and a clipped value loss."""

from __future__ import annotations

import torch

from rlinf_core.contracts.policy import EvaluateOutput
from rlinf_core.distributed.reduce import Reducer
from rlinf_core.foundation.checks import check_number
from rlinf_core.rl.algorithms.advantages import gae
from rlinf_core.rl.algorithms.base import Algorithm
from rlinf_core.rl.algorithms.losses import explained_variance, ppo_critic_loss
from rlinf_core.rl.data.micro_batch import MicroBatch
from rlinf_core.rl.data.trajectory import Trajectory


class PPO(Algorithm):
    """Proximal Policy Optimization (Schulman et al., 2017) with a critic.

    Args:
        gamma: discount.
        gae_lambda: GAE λ.
        value_clip: clip range of the value update around the rollout value (``null``: no clip).
        huber_delta: Huber δ of the value loss (``null``: squared error).
        value_loss_coef: weight of the value loss in the total loss.
        normalize_advantages: normalise advantages to mean 0 / std 1 over all valid entries of all
            ranks (RLinf ignores this flag and always normalises; here it is honoured).
        bootstrap_on_truncation: bootstrap truncated episodes with V(final observation);
            terminated episodes are never bootstrapped.
        **kwargs: the shared settings of :class:`Algorithm` (clip ranges, entropy bonus,
            update epochs, granularities).
    """

    uses_critic = True

    def __init__(
        self,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        value_clip: float | None = 0.2,
        huber_delta: float | None = 10.0,
        value_loss_coef: float = 1.0,
        normalize_advantages: bool = True,
        bootstrap_on_truncation: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)

        check_number("algorithm.gamma", gamma, low=0, high=1)
        check_number("algorithm.gae_lambda", gae_lambda, low=0, high=1)
        check_number("algorithm.value_clip", value_clip, low=0, low_open=True, optional=True)
        check_number("algorithm.huber_delta", huber_delta, low=0, low_open=True, optional=True)
        check_number("algorithm.value_loss_coef", value_loss_coef, low=0)
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.value_clip = value_clip
        self.huber_delta = huber_delta
        self.value_loss_coef = value_loss_coef
        self.normalize_advantages = normalize_advantages
        self.bootstrap_on_truncation = bootstrap_on_truncation

    def _advantages(self, traj: Trajectory, group_size: int, stats: object):
        if traj.values is None:
            raise ValueError("PPO needs a policy with a value head (e.g. add_value_head: true)")
        seq = traj.at_level(self.reward_type)
        boot = seq["bootstrap_values"] if self.bootstrap_on_truncation else None
        adv, ret = gae(
            seq["rewards"],
            seq["values"],
            seq["terminations"],
            seq["truncations"],
            boot,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
        )
        adv = traj.from_level(adv, self.reward_type)
        ret = traj.from_level(ret, self.reward_type)
        mask = traj.from_level(seq["valid"], self.reward_type).to(torch.float32)
        # value targets at the critic's granularity: per sub-step ([.., C]) or per chunk ([.., 1]).
        Cv = traj.values.shape[-1]
        if ret.dim() == 2:  # chunk-level rewards
            target, tmask = ret.unsqueeze(-1).expand(*ret.shape, Cv), mask.unsqueeze(-1).expand(*mask.shape, Cv)
        elif Cv == ret.shape[-1]:
            target, tmask = ret, mask
        else:  # one value per chunk: it estimates the return from the chunk's first sub-step
            target, tmask = ret[..., :1], mask[..., :1]
        return adv, mask, (target, tmask)

    def _postprocess(self, adv: torch.Tensor, mask: torch.Tensor, reduce: Reducer) -> torch.Tensor:
        if not self.normalize_advantages:
            return adv
        m = mask.to(adv.dtype)
        n = reduce.sum(m.sum().double())
        mean = reduce.sum((adv * m).sum().double()) / n.clamp(min=1)
        var = reduce.sum((((adv - mean.float()) ** 2) * m).sum().double()) / n.clamp(min=1)
        return ((adv - mean.float()) / (var.sqrt().float() + 1e-5)) * m

    def loss(self, out: EvaluateOutput, mb: MicroBatch, actor_enabled: bool = True):
        loss, metrics = super().loss(out, mb, actor_enabled)
        if out.values is None:
            raise ValueError("PPO: the policy returned no values; set add_value_head: true")
        samples, values = mb.samples, out.values
        old, target = samples.old_values, samples.value_targets
        vmask = self._weighted(samples.value_mask, samples.loss_weight)
        if values.shape != target.shape:
            raise ValueError(f"policy values have shape {tuple(values.shape)}, expected {tuple(target.shape)}")
        value_loss, stats = ppo_critic_loss(
            values,
            old,
            target,
            vmask,
            self.value_clip,
            self.huber_delta,
            denom=mb.denominators.value,
        )
        metrics["train/critic/value_loss"] = value_loss.detach() * mb.per_minibatch
        metrics["train/critic/value_clip_ratio"] = stats["value_clip_ratio"]
        metrics["train/critic/explained_variance"] = explained_variance(values.detach(), target, vmask)
        return loss + self.value_loss_coef * value_loss, metrics
