"""GRPO: group-relative outcome advantages, no critic."""

from __future__ import annotations

import sys
from typing import Literal

import torch
import torch.distributed as dist

from rlinf_core.distributed.reduce import Reducer
from rlinf_core.foundation.checks import ConfigValueError
from rlinf_core.rl.algorithms.advantages import check_score_scale, group_filter_mask, group_normalized_scores
from rlinf_core.rl.algorithms.base import Algorithm, global_std
from rlinf_core.rl.data.trajectory import Samples, Trajectory


class GRPO(Algorithm):
    """Group Relative Policy Optimization (Shao et al., 2024) for episodic VLA rollouts.

    Each group is ``env.group_size`` consecutive env slots that started from the same initial
    state (checked at every rollout). A trajectory's score is the return of its first episode
    (``auto_reset`` must be off); its advantage ``(s − mean_G) / (std + 1e-6)`` is applied to
    every valid step up to and including the step that ended the episode.

    Args:
        filter_rewards: drop groups whose mean score is outside ``[rewards_lower_bound,
            rewards_upper_bound]`` (e.g. all-success / all-fail groups with binary rewards).
        rewards_lower_bound: lower bound of a kept group's mean score.
        rewards_upper_bound: upper bound of a kept group's mean score.
        scale_rewards: the std that divides the centred scores: ``group`` (std_G, GRPO), ``batch``
            (the std of all scores of the RL step's rollouts on all ranks; keeps near-tied groups'
            advantages small, the better choice for dense rewards), ``task`` (as ``batch``, but the std of the
            scores of each group's own task: in a multi-task env, a task whose scores spread less is not drowned
            by one whose scores spread more) or ``none`` (Dr. GRPO).
        clip_ratio_high: upper clip range (DAPO's "clip higher" default 0.28).
        **kwargs: the other shared settings of :class:`Algorithm`.
    """

    uses_critic = False

    def __init__(
        self,
        filter_rewards: bool = False,
        rewards_lower_bound: float = 0.1,
        rewards_upper_bound: float = 0.9,
        scale_rewards: Literal["group", "batch", "task", "none"] = "group",
        clip_ratio_high: float = 0.28,
        **kwargs,
    ) -> None:
        super().__init__(clip_ratio_high=clip_ratio_high, **kwargs)
        if rewards_lower_bound > rewards_upper_bound:
            raise ValueError("rewards_lower_bound must be <= rewards_upper_bound")
        self.filter_rewards = filter_rewards
        self.rewards_lower_bound = rewards_lower_bound
        self.rewards_upper_bound = rewards_upper_bound
        self.scale_rewards = check_score_scale(scale_rewards)  # fail at config time, not after a rollout
        self._warned_all_filtered = False
        self._task_of = None  # scale_rewards: task: the env's reset state id -> task id (set by check)
        self._num_tasks = 0

    def check(self, env, policy) -> None:
        if env.group_size < 2:
            raise ConfigValueError(
                "GRPO needs env.group_size > 1: each group shares one initial state", {"env.group_size": env.group_size}
            )
        if env.auto_reset:
            raise ValueError("GRPO scores whole episodes: set env auto_reset: false")
        if self.scale_rewards == "task":
            self._task_of, self._num_tasks = env.task_ids, len(env.task_names)
        super().check(env, policy)

    def _rollout_stats(self, trajs: list[Trajectory], reduce: Reducer) -> float | torch.Tensor | None:
        """``scale_rewards: batch``: one std over every score of the step on every rank; ``task``: ``[tasks]``
        one per task (``None`` otherwise)."""
        if self.scale_rewards == "task":
            return self._task_stds(trajs, reduce)
        if self.scale_rewards != "batch":
            return None
        scores = torch.cat([_scores(t) for t in trajs])
        total = float(reduce.sum(torch.tensor(float(scores.numel()), dtype=torch.float64)))
        if len(trajs) > 1 or total != scores.numel():
            return global_std(scores, reduce)
        return None  # one trajectory on one rank: its own std is this std, bit for bit

    def _task_stds(self, trajs: list[Trajectory], reduce: Reducer) -> torch.Tensor:
        """``[tasks]`` unbiased std of the step's scores of each task, on every rank (one all-reduce of counts, sums
        and squares); 0 for a task with fewer than two scores (its groups then keep unscaled advantages)."""
        if self._task_of is None:
            raise RuntimeError("GRPO scale_rewards: task needs check(env, policy) first (RLModule calls it)")
        moments = torch.zeros(self._num_tasks, 3, dtype=torch.float64)
        for traj in trajs:
            scores = _scores(traj).double()
            moments.index_add_(0, self._tasks(traj), torch.stack([torch.ones_like(scores), scores, scores**2], -1))
        n, total, squares = reduce.sum(moments).unbind(-1)
        var = (squares - total**2 / n.clamp(min=1)) / (n - 1).clamp(min=1)
        return torch.where(n > 1, var.clamp(min=0).sqrt(), torch.zeros_like(var))

    def _tasks(self, traj: Trajectory) -> torch.Tensor:
        """``int64 [B]`` the task of each env slot's episode (the env's ``task_ids`` of its reset state)."""
        return torch.as_tensor(self._task_of(traj.reset_state_ids[0].numpy()), dtype=torch.long)

    def compute(
        self, trajs: list[Trajectory], group_size: int, reduce: Reducer, max_episode_steps: int | None = None
    ) -> tuple[Samples, dict[str, float]]:
        samples, metrics = super().compute(trajs, group_size, reduce, max_episode_steps)
        if self.filter_rewards:
            kept = sum(self._kept_groups(t, group_size) for t in trajs)
            groups = sum(t.rewards.shape[1] // group_size for t in trajs)
            kept, total = reduce.sum(torch.tensor([float(kept), float(groups)], dtype=torch.float64)).tolist()
            metrics["rollout/kept_groups_fraction"] = kept / max(total, 1.0)
            if kept == 0 and not self._warned_all_filtered:
                self._warned_all_filtered = True
                _warn_once_per_run(
                    f"rlinf: warning: algorithm.filter_rewards dropped every one of {total:.0f} groups of this RL "
                    f"step (no group mean score in [{self.rewards_lower_bound}, {self.rewards_upper_bound}]): "
                    "the step updates nothing; steps like it are logged as rollout/kept_groups_fraction 0"
                )
        return samples, metrics

    def _kept_groups(self, traj: Trajectory, group_size: int) -> int:
        keep = group_filter_mask(_scores(traj), group_size, self.rewards_lower_bound, self.rewards_upper_bound)
        return int(keep.view(-1, group_size)[:, 0].sum())

    def _advantages(self, traj: Trajectory, group_size: int, stats: float | torch.Tensor | None):
        ids = traj.reset_state_ids[0].view(-1, group_size)
        if not (ids == ids[:, :1]).all():
            raise RuntimeError(f"GRPO groups do not share their initial state: reset ids per group {ids.tolist()}")
        scores = _scores(traj)
        if self.scale_rewards == "task":
            stats = stats[self._tasks(traj)].float()
        adv = group_normalized_scores(scores, group_size, scale=self.scale_rewards, batch_std=stats)
        keep = torch.ones_like(scores, dtype=torch.bool)
        if self.filter_rewards:
            keep = group_filter_mask(scores, group_size, self.rewards_lower_bound, self.rewards_upper_bound)
        seq = traj.at_level(self.reward_type)
        mask = traj.from_level(seq["valid"], self.reward_type)
        keep_b = keep.view(1, -1, *([1] * (mask.dim() - 2)))
        mask = (mask & keep_b).to(torch.float32)
        adv_b = adv.view(1, -1, *([1] * (mask.dim() - 2))).expand_as(mask) * mask
        return adv_b, mask, None


def _scores(traj: Trajectory) -> torch.Tensor:
    """``[B]`` return of each env slot's first episode."""
    return (traj.rewards * traj.valid).sum((0, 2))


def _warn_once_per_run(line: str) -> None:
    """``line`` on stderr from the first rank only."""

    if not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0:
        print(line, file=sys.stderr, flush=True)
