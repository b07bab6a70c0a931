"""``WorkerEnv``: any :class:`~rlinf_core.Env` run in ``num_workers`` worker processes, behind the same API.

The RL loop applies it (:func:`vectorize`) to its envs whose ``num_workers > 0``; a plugin's env never
knows about processes. Process management, restarts and the shared-memory merge are in
:mod:`rlinf_core.envs.vector.workers`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlinf_core.contracts.env import ChunkStepResult, Env, observed
from rlinf_core.contracts.observation import Observation
from rlinf_core.envs.vector.workers import EnvWorkerPool

__all__ = ["WorkerEnv", "vectorize"]

# settings the RL loop and callbacks assign on an env: they live on the wrapped env, where the pool reads them
_FORWARDED_SETTINGS = ("capture_frames", "step_observers", "concurrent_envs")


class WorkerEnv(EnvWorkerPool):
    """An env whose ``num_envs`` sub-envs run in ``env.num_workers`` worker processes.

    Every Env method and property works as on ``env`` itself; anything else (``num_envs``, ``video_cfg``,
    ``task_names``, …) is read from ``env``, which never builds a simulator in this process. Each worker
    builds ``env.clone(num_envs=B // W, num_workers=0)`` sharded to every ``W``-th initial state.

    Args:
        env: the env to run in workers; its ``num_workers`` (>= 1) is the number of processes.
    """

    def __init__(self, env: Env) -> None:
        if isinstance(env, WorkerEnv):
            raise TypeError("WorkerEnv(env): env already runs in worker processes")
        if env.num_workers < 1:
            raise ValueError(f"WorkerEnv needs an env with num_workers >= 1, got {env.num_workers}")
        super().__init__(env)

    def __getattr__(self, name: str) -> Any:
        # only called for names the wrapper lacks; "env" is missing while unpickling: no recursion then
        if name == "env" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FORWARDED_SETTINGS:
            setattr(self.env, name, value)
        else:
            super().__setattr__(name, value)

    @property
    def capturing(self) -> bool:
        return self.env.capturing

    def _frame_buffer(self) -> list[dict[str, Any]]:
        return self._frames

    @observed
    def reset(self, reset_state_ids: np.ndarray | None = None) -> Observation:
        return super().reset(reset_state_ids)

    @observed
    def chunk_step(self, actions: torch.Tensor | np.ndarray) -> ChunkStepResult:
        return super().chunk_step(actions)

    @property
    def pool(self) -> np.ndarray:
        return self.env.pool

    def clone(self, **overrides: Any) -> WorkerEnv | Env:
        """A new env (in its own workers, unless ``num_workers=0`` is among ``overrides``)."""
        return vectorize(self.env.clone(**overrides))

    def __repr__(self) -> str:
        return f"WorkerEnv({self.env!r}, num_workers={self.env.num_workers})"


def vectorize(env: Env | None) -> Env | WorkerEnv | None:
    """``env`` in worker processes when its ``num_workers > 0``, else ``env`` itself (also ``None``)."""
    if env is None or isinstance(env, WorkerEnv) or env.num_workers == 0:
        return env
    return WorkerEnv(env)
