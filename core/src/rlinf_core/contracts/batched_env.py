"""The one interface of a batched env, whichever process runs its sub-envs.

:class:`BatchedEnv` is what the RL loop, the callbacks and evaluation use of an env. Two classes implement it:
:class:`rlinf_core.Env` (through :class:`~rlinf_core.contracts.env_runtime.EnvRuntime`) runs the sub-envs in this
process, and :class:`rlinf_core.envs.vector.WorkerEnv` runs the sub-envs of an ``Env`` in worker processes. A
plugin's own extras (a scripted expert, a simulator handle) belong to its ``Env`` only: reach them through
:attr:`BatchedEnv.unwrapped`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlinf_core.contracts.observation import ChunkStepResult, Observation

__all__ = ["BatchedEnv", "VideoConfig"]


@dataclass
class VideoConfig:
    """Video recording of rollouts (RLinf v0.3's ``video_cfg``).

    Args:
        save_video: record videos of this env's episodes.
        video_base_dir: where mp4 files go; default ``<log_dir>/video/{train,eval}``.
        info_on_video: draw step, reward and success on every tile.
        fps: frames per second of the written video.
        every_n_epochs: record one rollout every this many training epochs (eval: every eval).
        max_envs: at most this many sub-envs are tiled into the video.
    """

    save_video: bool = False
    video_base_dir: str | None = None
    info_on_video: bool = True
    fps: int = 10
    every_n_epochs: int = 1
    max_envs: int = 16


class BatchedEnv:
    """``num_envs`` sub-environments stepped together by action chunks (see :mod:`rlinf_core.contracts.env` for
    the semantics). Every name below is implemented by both :class:`rlinf_core.Env` and
    :class:`rlinf_core.envs.vector.WorkerEnv`."""

    # ------------------------------------------------------------------ settings (the Env's constructor arguments)
    num_envs: int
    group_size: int
    auto_reset: bool
    ignore_terminations: bool
    max_episode_steps: int
    seed: int
    is_eval: bool
    task_id_filter: list[int] | None
    reset_state_id_filter: list[int] | None
    video_cfg: VideoConfig
    action_dim: int
    episode_metrics: tuple[str, ...]
    #: observers called after every ``reset`` / ``chunk_step`` (see :attr:`rlinf_core.Env.step_observers`)
    step_observers: tuple = ()
    #: capture frames for a video (see :meth:`pop_frames`)
    capture_frames: bool = False

    @property
    def unwrapped(self) -> Any:
        """The :class:`rlinf_core.Env` itself (for a plugin's own extras; in a :class:`WorkerEnv` it never builds
        a simulator)."""
        raise NotImplementedError

    @property
    def capturing(self) -> bool:
        """Frames are captured this step: a video is recorded (``capture_frames``) or a step observer is set."""
        return self.capture_frames or bool(self.step_observers)

    # ------------------------------------------------------------------ the reset-state index
    @property
    def num_reset_states(self) -> int:
        """Size of the flat (task, trial) index of initial states."""
        raise NotImplementedError

    def task_ids(self, reset_state_ids: np.ndarray) -> np.ndarray:
        """Task id of each reset state id."""
        raise NotImplementedError

    @property
    def task_names(self) -> list[str]:
        """Human-readable name per task id (for per-task tables)."""
        raise NotImplementedError

    @property
    def pool(self) -> np.ndarray:
        """Reset state ids this env draws from (after the filters and sharding)."""
        raise NotImplementedError

    def shard(self, index: int, count: int) -> None:
        """Use only every ``count``-th initial state starting at ``index`` (ranks, pipeline stages)."""
        raise NotImplementedError

    def restart_pool(self) -> None:
        """Eval mode: visit the whole pool again (another eval pass)."""
        raise NotImplementedError

    def sampler_state(self) -> dict[str, Any]:
        """State of the initial-state sampler (saved in checkpoints so a resume continues it)."""
        raise NotImplementedError

    def load_sampler_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ stepping
    def ensure_built(self) -> None:
        """Build the simulator(s) now (otherwise on the first reset)."""
        raise NotImplementedError

    def reset(self, reset_state_ids: np.ndarray | None = None) -> Observation:
        """Start new episodes in every sub-env and return the first observation."""
        raise NotImplementedError

    def chunk_step(self, actions: torch.Tensor | np.ndarray) -> ChunkStepResult:
        """Execute an action chunk ``[B, C, D]`` (env scale) in every sub-env."""
        raise NotImplementedError

    @property
    def eval_finished(self) -> bool:
        """Eval mode: every reset state of the pool was visited and no episode is running."""
        raise NotImplementedError

    @property
    def live_envs(self) -> np.ndarray:
        """``bool [B]``: sub-envs in a running episode."""
        raise NotImplementedError

    @property
    def any_live(self) -> bool:
        """Some sub-env is in a running episode."""
        raise NotImplementedError

    @property
    def reset_state_ids(self) -> np.ndarray:
        """``int64 [B]`` initial state of the current episode of each sub-env (-1: idle)."""
        raise NotImplementedError

    def set_device(self, device: str | torch.device) -> None:
        """Run on ``device`` (the RL module's); simulators on the CPU ignore it."""

    def close(self) -> None:
        """Release simulators (and worker processes); the next reset builds again."""
        raise NotImplementedError

    def clone(self, **overrides: Any) -> BatchedEnv:
        """A new, unbuilt env of the same kind and arguments, with ``overrides`` of the Env's arguments applied."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what happened
    def flush_episodes(self) -> None:
        """Close still-running episodes (end of a rollout epoch without auto-reset)."""
        raise NotImplementedError

    def pop_episodes(self) -> list[dict[str, Any]]:
        """Records of the episodes finished since the last call (``success_once``, ``return``, …)."""
        raise NotImplementedError

    def pop_frames(self) -> list[dict[str, Any]]:
        """Frames captured since the last call (see :meth:`rlinf_core.Env.pop_frames`)."""
        raise NotImplementedError

    def pop_metrics(self) -> dict[str, float]:
        """Env-level counters since the last call (worker envs: ``env/worker_restarts``, ``env/dropped_episodes``)."""
        return {}
