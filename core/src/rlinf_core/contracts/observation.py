"""The observation batch every env returns and every policy consumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import numpy as np
import torch


@dataclass
class Observation:
    """A batch of B observations.

    Attributes:
        main_images: ``uint8 [B, H, W, 3]`` main (third-person) camera, upright, RGB.
        task_descriptions: one natural-language instruction per env (``len == B``).
        wrist_images: optional ``uint8 [B, H, W, 3]`` (or ``[B, N, H, W, 3]`` for N wrist cameras).
        states: optional ``float32 [B, S]`` proprioceptive state.
    """

    main_images: torch.Tensor
    task_descriptions: list[str]
    wrist_images: torch.Tensor | None = None
    states: torch.Tensor | None = None

    def __post_init__(self) -> None:
        img, shape = self.main_images, self.main_images.shape
        if img.dtype != torch.uint8 or len(shape) != 4 or shape[3] != 3:
            raise ValueError(f"Observation.main_images must be uint8 [B, H, W, 3], got {img.dtype} {tuple(shape)}")
        if len(self.task_descriptions) != shape[0]:
            raise ValueError(f"Observation has {shape[0]} images but {len(self.task_descriptions)} task descriptions")
        if self.states is not None and (self.states.dim() != 2 or self.states.shape[0] != shape[0]):
            raise ValueError(f"Observation.states must be [B, S], got {tuple(self.states.shape)}")

    def __len__(self) -> int:
        return self.main_images.shape[0]

    def _tensors(self):
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "task_descriptions"}

    def index(self, idx: torch.Tensor | Sequence[int] | slice) -> Observation:
        """Rows ``idx`` (a slice, index list or bool/long tensor)."""
        if isinstance(idx, slice):
            rows = list(range(len(self)))[idx]
        else:
            idx_t = torch.as_tensor(idx)
            if idx_t.dtype == torch.bool:
                idx_t = idx_t.nonzero().flatten()
            rows = idx_t.tolist()
        rows_t = torch.as_tensor(rows, dtype=torch.long)
        tensors = {k: (v[rows_t] if v is not None else None) for k, v in self._tensors().items()}
        return Observation(task_descriptions=[self.task_descriptions[i] for i in rows], **tensors)

    def to(self, device: torch.device | str) -> Observation:
        tensors = {k: (v.to(device) if v is not None else None) for k, v in self._tensors().items()}
        return replace(self, **tensors)

    @staticmethod
    def cat(observations: Sequence[Observation]) -> Observation:
        first = observations[0]
        tensors = {}
        for key, value in first._tensors().items():
            tensors[key] = None if value is None else torch.cat([getattr(o, key) for o in observations])
        descriptions = [d for o in observations for d in o.task_descriptions]
        return Observation(task_descriptions=descriptions, **tensors)

    def nbytes(self) -> int:
        """Bytes held by the tensors (what a stored rollout sample costs)."""
        return sum(v.numel() * v.element_size() for v in self._tensors().values() if v is not None)


class StepResult(NamedTuple):
    """What :meth:`Env._step` returns: one sub-step of every sub-env, B rows (rows not ``live`` are ignored).

    Attributes:
        rewards: ``float [B]`` the sub-step's rewards.
        terminated: ``bool [B]`` the episode ended in a terminal state (success, or a failure that ends it).
        success: ``bool [B]`` the task is solved at this sub-step.
    """

    rewards: np.ndarray
    terminated: np.ndarray
    success: np.ndarray


@dataclass
class ChunkStepResult:
    """What :meth:`Env.chunk_step` returns for actions ``[B, C, D]``.

    Attributes:
        obs: observation after the chunk (after the auto-reset of finished sub-envs).
        rewards: ``float32 [B, C]`` per sub-step rewards (0 where not ``valid``).
        terminations: ``bool [B, C]`` the episode ended in a terminal state at this sub-step.
        truncations: ``bool [B, C]`` the episode hit ``max_episode_steps`` at this sub-step.
        success: ``bool [B, C]`` the env reported success at this sub-step.
        valid: ``bool [B, C]`` the sub-step belonged to a live episode (False after a done until
            the next reset, and for idle eval slots).
        final_obs: observation at the end of truncated episodes, rows ``final_obs_env_ids``;
            used to bootstrap ``V(s_T)``. ``None`` when nothing was truncated.
        final_obs_env_ids: ``int64 [n]`` the sub-envs ``final_obs`` belongs to.
        reset_state_ids: ``int64 [B]`` initial state of the episode each sub-step belonged to.
    """

    obs: Observation
    rewards: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor
    success: torch.Tensor
    valid: torch.Tensor
    final_obs: Observation | None = None
    final_obs_env_ids: torch.Tensor | None = None
    reset_state_ids: torch.Tensor | None = None

    @property
    def dones(self) -> torch.Tensor:
        return self.terminations | self.truncations
