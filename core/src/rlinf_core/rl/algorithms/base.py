"""Policy-gradient algorithms: advantage computation and the per-micro-batch loss.

Granularity keys (as in RLinf):

- ``reward_type``: ``action_level`` (one reward/advantage per sub-step) or ``chunk_level``
  (rewards summed over the chunk, one advantage per chunk);
- ``logprob_type`` / ``entropy_type``: ``token_level`` (``[.., C, D]``, one ratio per action token),
  ``action_level`` (sum over D) or ``chunk_level`` (sum over C and D; needs chunk-level rewards).
"""

from __future__ import annotations

from typing import Literal

import torch

from rlinf_core.contracts.policy import EvaluateOutput
from rlinf_core.distributed.reduce import Reducer
from rlinf_core.foundation.checks import check_choice, check_number
from rlinf_core.rl.algorithms.losses import KL_ESTIMATORS, kl_penalty, masked_mean, ppo_actor_loss
from rlinf_core.rl.data.micro_batch import MicroBatch
from rlinf_core.rl.data.trajectory import Samples, Trajectory, flatten_steps

Level = Literal["token_level", "action_level", "chunk_level"]
RewardLevel = Literal["action_level", "chunk_level"]
LossAgg = Literal["step_mean", "trajectory_mean"]
KLEstimator = Literal["k1", "k2", "k3"]


def reduce_level(x: torch.Tensor, level: str) -> torch.Tensor:
    """``[S, C, D]`` → token ``[S, C, D]``, action ``[S, C]`` or chunk ``[S]``."""
    if level == "token_level":
        return x
    if level == "action_level":
        return x.sum(-1)
    if level == "chunk_level":
        return x.sum((-1, -2))
    raise ValueError(f"granularity must be token_level, action_level or chunk_level, got {level!r}")


def expand_to(x: torch.Tensor, level: str) -> torch.Tensor:
    """Broadcast per-sample advantages/masks (``[S, C]`` or ``[S]``) to a log-prob level."""
    if level == "token_level":
        return x.unsqueeze(-1) if x.dim() == 2 else x.view(-1, 1, 1)
    if level == "action_level":
        return x if x.dim() == 2 else x.view(-1, 1)
    return x if x.dim() == 1 else x[:, 0]


class Algorithm:
    """Shared settings of PPO-style policy updates.

    Args:
        clip_ratio_low: lower clip range ε_low of the ratio (1 − ε_low).
        clip_ratio_high: upper clip range ε_high of the ratio (1 + ε_high).
        clip_ratio_c: dual-clip constant (> 1), ``None`` to disable.
        entropy_bonus: coefficient of the entropy bonus.
        update_epoch: passes over the rollout per RL step.
        reward_type: ``action_level`` or ``chunk_level``.
        logprob_type: ``token_level``, ``action_level`` or ``chunk_level``.
        entropy_type: granularity of the entropy term.
        loss_agg: how the per-entry losses are averaged. ``step_mean``: mean over the valid
            entries of the minibatch (a long failed episode weighs more than a short success).
            ``trajectory_mean``: RLinf's ``masked_mean_ratio``, which it applies whenever episodes do
            not auto-reset: each entry is weighted ``max_episode_steps / n_i`` (``n_i``: valid
            sub-steps of its trajectory) and the sum is divided by *all* stored entries, masked
            ones included, so every trajectory counts equally and dropped (filtered) groups
            scale the loss down as upstream. Needs ``auto_reset: false``.
        kl_beta: coefficient of a penalty ``kl_beta · KL(π_θ ‖ π_ref)`` toward the reference policy: the policy
            as it was when training started (the RL module keeps a frozen copy of it and computes its log-probs
            of every rollout). ``0``: no penalty, no reference copy.
        kl_penalty: the per-entry KL estimator (:func:`~rlinf_core.rl.algorithms.losses.kl_penalty`): ``k3``
            (GRPO's, ≥ 0), ``k2`` or ``k1``; at ``logprob_type`` granularity, aggregated like the actor loss.
    """

    uses_critic = False

    def __init__(
        self,
        clip_ratio_low: float = 0.2,
        clip_ratio_high: float = 0.2,
        clip_ratio_c: float | None = 3.0,
        entropy_bonus: float = 0.0,
        update_epoch: int = 1,
        reward_type: RewardLevel = "action_level",
        logprob_type: Level = "token_level",
        entropy_type: Level = "token_level",
        loss_agg: LossAgg = "step_mean",
        kl_beta: float = 0.0,
        kl_penalty: KLEstimator = "k3",
    ) -> None:
        for name, level in (("logprob_type", logprob_type), ("entropy_type", entropy_type)):
            if level == "chunk_level" and reward_type != "chunk_level":
                raise ValueError(f"{name}: chunk_level needs reward_type: chunk_level (one advantage per chunk)")

        check_number("algorithm.clip_ratio_low", clip_ratio_low, low=0, high=1)
        check_number("algorithm.clip_ratio_high", clip_ratio_high, low=0)
        check_number(
            "algorithm.clip_ratio_c", clip_ratio_c, low=1, low_open=True, optional=True, hint="null: no dual clip"
        )
        check_number("algorithm.entropy_bonus", entropy_bonus)
        check_number("algorithm.update_epoch", update_epoch, low=1, high=1000)
        check_choice("algorithm.loss_agg", loss_agg, ("step_mean", "trajectory_mean"))
        check_number("algorithm.kl_beta", kl_beta, low=0)
        check_choice("algorithm.kl_penalty", kl_penalty, KL_ESTIMATORS)
        self.loss_agg = loss_agg
        self.clip_ratio_low = clip_ratio_low
        self.clip_ratio_high = clip_ratio_high
        self.clip_ratio_c = clip_ratio_c
        self.entropy_bonus = entropy_bonus
        self.update_epoch = update_epoch
        self.reward_type = reward_type
        self.logprob_type = logprob_type
        self.entropy_type = entropy_type
        self.kl_beta = kl_beta
        self.kl_penalty = kl_penalty

    @property
    def uses_reference(self) -> bool:
        """Whether the loss needs the reference policy's log-probs of the rollout (``Samples.ref_logprobs``)."""
        return self.kl_beta > 0

    def check(self, env, policy) -> None:
        """Raise a one-line ``ValueError`` if ``env`` / ``policy`` settings cannot work with this
        algorithm (called by :class:`rlinf_core.RLModule` at construction). Subclasses extend it."""
        if self.loss_agg == "trajectory_mean" and env.auto_reset:
            raise ValueError(
                "algorithm loss_agg: trajectory_mean weights whole episodes: set env auto_reset: false "
                "(or use loss_agg: step_mean, as RLinf does with auto-reset)"
            )
        if self.uses_critic and not policy.has_value_head:
            raise ValueError(f"{type(self).__name__} needs a critic: set the policy's add_value_head: true")

    # ---------------------------------------------------------------- advantages
    def compute(
        self, trajs: list[Trajectory], group_size: int, reduce: Reducer, max_episode_steps: int | None = None
    ) -> tuple[Samples, dict[str, float]]:
        """Advantages of every rollout epoch, as flat samples, plus ``rollout/*`` metrics.

        ``max_episode_steps`` (default: the rollout length N·C) scales the ``trajectory_mean`` weights.
        """
        stats = self._rollout_stats(trajs, reduce)
        advs, masks, targets = [], [], []
        for traj in trajs:
            adv, mask, target = self._advantages(traj, group_size, stats)
            advs.append(adv)
            masks.append(mask)
            targets.append(target)
        adv = torch.cat([flatten_steps(a) for a in advs])
        mask = torch.cat([flatten_steps(m) for m in masks])
        adv = self._postprocess(adv, mask, reduce)
        samples = Samples.from_trajectories(trajs, adv, mask, targets if self.uses_critic else None)
        if self.loss_agg == "trajectory_mean":
            samples.loss_weight = torch.cat([flatten_steps(trajectory_weights(t, max_episode_steps)) for t in trajs])
        valid = mask.bool()
        rewards = torch.cat([flatten_steps(t.rewards) for t in trajs])
        reward_valid = torch.cat([flatten_steps(t.valid) for t in trajs])
        metrics = {
            "rollout/rewards": _global_mean(rewards, reward_valid, reduce),
            "rollout/advantages_mean": _global_mean(adv, valid, reduce),
            "rollout/advantages_max": _global_extreme(adv, valid, reduce, largest=True),
            "rollout/advantages_min": _global_extreme(adv, valid, reduce, largest=False),
            "rollout/valid_fraction": float(
                reduce.sum(valid.sum().double()) / reduce.sum(torch.tensor(float(valid.numel()), dtype=torch.float64))
            ),
        }
        if samples.value_targets is not None:
            vm = samples.value_mask.bool()
            metrics["rollout/returns_mean"] = _global_mean(samples.value_targets, vm, reduce)
            metrics["rollout/returns_max"] = _global_extreme(samples.value_targets, vm, reduce, True)
            metrics["rollout/returns_min"] = _global_extreme(samples.value_targets, vm, reduce, False)
        return samples, metrics

    def _rollout_stats(self, trajs: list[Trajectory], reduce: Reducer) -> object:
        """Statistics over all of the step's rollouts (all ranks) that :meth:`_advantages` needs (default: none)."""
        return None

    def _advantages(self, traj: Trajectory, group_size: int, stats: object):
        raise NotImplementedError

    def _postprocess(self, adv: torch.Tensor, mask: torch.Tensor, reduce: Reducer) -> torch.Tensor:
        return adv

    # ---------------------------------------------------------------- loss
    def denominator(self, mask: torch.Tensor) -> torch.Tensor:
        """Local loss denominator of one minibatch's mask: its valid entries (``step_mean``) or
        all its entries (``trajectory_mean``, as RLinf's ``masked_mean_ratio``)."""
        if self.loss_agg == "trajectory_mean":
            return torch.tensor(float(mask.numel()), dtype=torch.float64)
        return mask.sum().double()

    @staticmethod
    def _weighted(mask: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """``mask [S, ...]`` times the per-sample loss weight ``[S]`` (if any)."""
        if weight is None:
            return mask
        return mask * weight.to(mask.dtype).view(-1, *([1] * (mask.dim() - 1)))

    def loss(
        self, out: EvaluateOutput, mb: MicroBatch, actor_enabled: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss of one micro-batch (its samples on the device of ``out``), and its metrics.

        The loss is the micro-batch's share of its minibatch's mean: its entries summed and divided by the
        minibatch's denominator (``mb.denominators``, over all ranks), so that the accumulated micro-batch losses
        average over the minibatch. The loss metrics report that mean (the share times ``mb.per_minibatch``).
        """
        samples, denom = mb.samples, mb.denominators.policy
        logp = reduce_level(out.logprobs, self.logprob_type)
        old = reduce_level(samples.old_logprobs, self.logprob_type)
        adv = expand_to(samples.adv, self.logprob_type)
        weighted = self._weighted(samples.mask, samples.loss_weight)
        mask = expand_to(weighted, self.logprob_type).expand_as(logp)
        adv = adv.expand_as(logp)
        n_per_entry = mask[0].numel() / samples.mask[0].numel()
        policy_loss, stats = ppo_actor_loss(
            logp,
            old,
            adv,
            mask,
            self.clip_ratio_low,
            self.clip_ratio_high,
            self.clip_ratio_c,
            denom=denom * n_per_entry,
        )
        metrics = {f"train/actor/{k}": v for k, v in stats.items()}
        metrics["train/actor/policy_loss"] = policy_loss.detach() * mb.per_minibatch
        loss = policy_loss if actor_enabled else policy_loss * 0.0
        if self.uses_reference:
            if samples.ref_logprobs is None:
                raise RuntimeError(
                    "algorithm.kl_beta > 0 needs the reference policy's log-probs (Samples.ref_logprobs)"
                )
            ref = reduce_level(samples.ref_logprobs.to(logp.device), self.logprob_type)
            kl = masked_mean(kl_penalty(logp, ref, self.kl_penalty), mask, denom * n_per_entry)
            metrics["train/actor/kl_to_reference"] = kl.detach() * mb.per_minibatch
            if actor_enabled:
                loss = loss + self.kl_beta * kl
        if out.entropy is not None:
            ent = reduce_level(out.entropy, self.entropy_type)
            ent_mask = expand_to(weighted, self.entropy_type).expand_as(ent)
            entropy = masked_mean(ent, ent_mask, denom * ent_mask[0].numel() / samples.mask[0].numel())
            metrics["train/entropy_loss"] = entropy.detach() * mb.per_minibatch
            if self.entropy_bonus and actor_enabled:
                loss = loss - self.entropy_bonus * entropy
        return loss, metrics


def trajectory_weights(traj: Trajectory, max_episode_steps: int | None = None) -> torch.Tensor:
    """RLinf's ``masked_mean_ratio`` weights ``T / n_b`` per chunk step, ``[N, B]``.

    ``n_b`` = valid sub-steps of env slot ``b``'s episode (RLinf's ``loss_mask_sum``, counted before
    group filtering, in sub-steps also for chunk-level rewards); ``T`` = ``max_episode_steps``
    (default: the rollout length N·C).
    """
    N, B, C = traj.valid.shape
    T = float(max_episode_steps or N * C)
    n = traj.valid.sum((0, 2)).to(torch.float32).clamp(min=1.0)  # [B]
    return (T / n).unsqueeze(0).expand(N, B).contiguous()


def _global_mean(x: torch.Tensor, mask: torch.Tensor, reduce: Reducer) -> float:
    mask = mask.to(x.dtype)
    total = reduce.sum((x * mask).sum().double())
    count = reduce.sum(mask.sum().double())
    return float(total / count) if count > 0 else float("nan")


def global_std(x: torch.Tensor, reduce: Reducer) -> float:
    """Unbiased std of all entries of ``x`` on all ranks (two passes: global mean, then squared deviations)."""
    x = x.double().flatten()
    n = float(reduce.sum(torch.tensor(float(x.numel()), dtype=torch.float64)))
    if n < 2:
        return float("nan")
    mean = reduce.sum(x.sum()) / n
    return float((reduce.sum(((x - mean) ** 2).sum()) / (n - 1)).sqrt())


def _global_extreme(x: torch.Tensor, mask: torch.Tensor, reduce: Reducer, largest: bool) -> float:
    m = mask.bool()
    sign = 1.0 if largest else -1.0
    local = (sign * x[m].double()).max() if m.any() else torch.tensor(float("-inf"), dtype=torch.float64)
    return float(sign * reduce.max(local))
