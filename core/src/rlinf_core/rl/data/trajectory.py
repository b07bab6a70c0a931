"""Rollout storage: one :class:`Trajectory` per rollout epoch, then flat training samples.

Shapes: N chunk steps, B env slots, C sub-steps per chunk, D action dims, Cv value outputs per
chunk (1 or C). Observations stay uint8 (the policy re-preprocesses them in the update), so a
stored sample costs its raw pixels, not its preprocessed model inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlinf_core.contracts.observation import Observation


@dataclass
class Trajectory:
    """One rollout epoch, time-major.

    Attributes:
        obs: N observations of B rows, the inputs of each chunk step.
        records: N policy records (dicts of ``[B, ...]`` tensors).
        logprobs: ``[N, B, C, D]`` rollout log-probs.
        values: ``[N + 1, B, Cv]`` critic values (row N: value after the last step) or ``None``.
        rewards: ``[N, B, C]``.
        terminations, truncations, valid: ``bool [N, B, C]``.
        bootstrap_values: ``[N, B, C]`` V(final observation) where truncated, else 0.
        reset_state_ids: ``int64 [N, B]`` initial state of the episode of each step.
    """

    obs: list[Observation]
    records: list[dict[str, torch.Tensor]]
    logprobs: torch.Tensor
    values: torch.Tensor | None
    rewards: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor
    valid: torch.Tensor
    bootstrap_values: torch.Tensor
    reset_state_ids: torch.Tensor

    @property
    def num_steps(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_envs(self) -> int:
        return self.rewards.shape[1]

    def at_level(self, reward_type: str) -> dict[str, torch.Tensor]:
        """Rewards, dones, masks and values as a time-major ``[T, B]`` sequence.

        ``action_level``: T = N·C sub-steps (a chunk-level value is repeated over its sub-steps);
        ``chunk_level``: T = N, rewards summed over the chunk.
        """
        N, B, C = self.rewards.shape

        def flat(x: torch.Tensor) -> torch.Tensor:  # [N, B, C] -> [N*C, B]
            return x.permute(0, 2, 1).reshape(N * C, B)

        out: dict[str, torch.Tensor] = {}
        if reward_type == "action_level":
            out["rewards"] = flat(self.rewards)
            out["terminations"] = flat(self.terminations)
            out["truncations"] = flat(self.truncations)
            out["valid"] = flat(self.valid)
            out["bootstrap_values"] = flat(self.bootstrap_values)
            if self.values is not None:
                v = self.values
                per_step = v[:N] if v.shape[-1] == C else v[:N, :, :1].expand(N, B, C)
                out["values"] = torch.cat([flat(per_step), v[N, :, :1].T], dim=0)
        elif reward_type == "chunk_level":
            out["rewards"] = self.rewards.sum(-1)
            out["terminations"] = self.terminations.any(-1)
            out["truncations"] = self.truncations.any(-1) & ~out["terminations"]
            out["valid"] = self.valid[..., 0]
            out["bootstrap_values"] = self.bootstrap_values.sum(-1)
            if self.values is not None:
                out["values"] = self.values[..., 0]
        else:
            raise ValueError(f"reward_type must be 'action_level' or 'chunk_level', got {reward_type!r}")
        return out

    def from_level(self, x: torch.Tensor, reward_type: str) -> torch.Tensor:
        """Inverse of the flattening in :meth:`at_level`: ``[T, B]`` → ``[N, B, C]`` or ``[N, B]``."""
        N, B, C = self.rewards.shape
        if reward_type == "action_level":
            return x.reshape(N, C, B).permute(0, 2, 1)
        return x

    @staticmethod
    def cat_envs(trajs: list[Trajectory]) -> Trajectory:
        if len(trajs) == 1:
            return trajs[0]
        N = trajs[0].num_steps
        keys = trajs[0].records[0].keys()
        return Trajectory(
            obs=[Observation.cat([t.obs[k] for t in trajs]) for k in range(N)],
            records=[{key: torch.cat([t.records[k][key] for t in trajs]) for key in keys} for k in range(N)],
            logprobs=torch.cat([t.logprobs for t in trajs], dim=1),
            values=None if trajs[0].values is None else torch.cat([t.values for t in trajs], dim=1),
            rewards=torch.cat([t.rewards for t in trajs], dim=1),
            terminations=torch.cat([t.terminations for t in trajs], dim=1),
            truncations=torch.cat([t.truncations for t in trajs], dim=1),
            valid=torch.cat([t.valid for t in trajs], dim=1),
            bootstrap_values=torch.cat([t.bootstrap_values for t in trajs], dim=1),
            reset_state_ids=torch.cat([t.reset_state_ids for t in trajs], dim=1),
        )


@dataclass
class Samples:
    """Flat training samples (one per chunk step and env slot) of a whole rollout.

    ``adv``/``mask`` are ``[S, C]`` (action-level rewards) or ``[S]`` (chunk-level);
    ``value_targets``/``value_mask``/``old_values`` are ``[S, Cv]``; ``loss_weight`` ``[S]`` is the
    per-sample weight of ``loss_agg: trajectory_mean`` (None: unweighted); ``ref_logprobs`` (shaped like
    ``old_logprobs``) are the reference policy's log-probs of the sampled actions, for a KL penalty (None: none).
    """

    obs: Observation
    records: dict[str, torch.Tensor]
    old_logprobs: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    old_values: torch.Tensor | None = None
    value_targets: torch.Tensor | None = None
    value_mask: torch.Tensor | None = None
    loss_weight: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None

    @classmethod
    def from_trajectories(
        cls,
        trajs: list[Trajectory],
        adv: torch.Tensor,
        mask: torch.Tensor,
        value_targets: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> Samples:
        """Flatten rollout epochs into samples.

        Args:
            trajs: one trajectory per rollout epoch (same env slots and record keys).
            adv: flat advantages ``[S, C]`` or ``[S]`` (``S`` = Σ N·B over ``trajs``).
            mask: flat loss mask, same shape as ``adv``.
            value_targets: per trajectory ``(targets [N, B, Cv], mask [N, B, Cv])`` of a critic;
                ``None`` without one (then ``old_values`` stays unset).
        """
        obs = Observation.cat([o for t in trajs for o in t.obs])
        keys = trajs[0].records[0].keys()
        records = {k: torch.cat([r[k] for t in trajs for r in t.records]) for k in keys}
        old_logprobs = torch.cat([flatten_steps(t.logprobs) for t in trajs])
        samples = cls(obs=obs, records=records, old_logprobs=old_logprobs, adv=adv, mask=mask)
        if value_targets is not None:
            samples.old_values = torch.cat([flatten_steps(t.values[:-1]) for t in trajs])
            samples.value_targets = torch.cat([flatten_steps(x[0]) for x in value_targets])
            samples.value_mask = torch.cat([flatten_steps(x[1]) for x in value_targets])
        return samples

    def __len__(self) -> int:
        return self.old_logprobs.shape[0]

    def select(self, idx: torch.Tensor) -> Samples:
        def pick(x):
            return None if x is None else x[idx]

        return Samples(
            obs=self.obs.index(idx),
            records={k: v[idx] for k, v in self.records.items()},
            old_logprobs=self.old_logprobs[idx],
            adv=self.adv[idx],
            mask=self.mask[idx],
            old_values=pick(self.old_values),
            value_targets=pick(self.value_targets),
            value_mask=pick(self.value_mask),
            loss_weight=pick(self.loss_weight),
            ref_logprobs=pick(self.ref_logprobs),
        )

    def to(self, device: torch.device | str) -> Samples:
        """The samples, every tensor on ``device``."""

        def move(x):
            return None if x is None else x.to(device)

        return Samples(
            obs=self.obs.to(device),
            records={k: v.to(device) for k, v in self.records.items()},
            old_logprobs=self.old_logprobs.to(device),
            adv=self.adv.to(device),
            mask=self.mask.to(device),
            old_values=move(self.old_values),
            value_targets=move(self.value_targets),
            value_mask=move(self.value_mask),
            loss_weight=move(self.loss_weight),
            ref_logprobs=move(self.ref_logprobs),
        )

    def nbytes_per_sample(self) -> float:
        total = self.obs.nbytes() + sum(v.numel() * v.element_size() for v in self.records.values())
        return total / max(len(self), 1)


def flatten_steps(x: torch.Tensor) -> torch.Tensor:
    """``[N, B, ...]`` → ``[N·B, ...]``."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
