"""What :class:`rlinf_core.Env` does for every simulator, so a plugin implements only the hooks in
:mod:`rlinf_core.contracts.env`: episode bookkeeping, auto-reset, GRPO groups sharing an initial state, the eval
grid that visits every reset state once, frame capture for videos and step observers, ``clone``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlinf_core.contracts.batched_env import BatchedEnv
from rlinf_core.contracts.observation import ChunkStepResult, Observation
from rlinf_core.contracts.reset_states import ResetStateSampler

__all__ = ["EnvRuntime", "observed"]


@dataclass
class _Episode:
    reset_state_id: int = -1
    ret: float = 0.0
    length: int = 0
    success_once: bool = False
    success_now: bool = False
    live: bool = False
    info: dict = field(default_factory=dict)


def observed(method):
    """Calls the env's :attr:`Env.step_observers` after ``reset`` / ``chunk_step`` (in this process; also used by
    :class:`rlinf_core.envs.vector.WorkerEnv`, whose frames come from the workers)."""

    @functools.wraps(method)
    def wrapper(self, *args: Any, **kwargs: Any):
        if not self.step_observers:
            return method(self, *args, **kwargs)
        n0 = len(self._frame_buffer())
        out = method(self, *args, **kwargs)
        buf = self._frame_buffer()
        frames = buf[n0:]
        if not self.capture_frames:  # captured only for the observers: do not keep them for a video
            del buf[n0:]
        for observer in self.step_observers:
            observer(self, method.__name__, args[0] if args else next(iter(kwargs.values()), None), out, frames)
        return out

    return wrapper


class EnvRuntime(BatchedEnv):
    """The public API of :class:`rlinf_core.Env` (its base class), :class:`BatchedEnv` in this process: built on
    the env's hooks (``_reset_envs``, ``_chunk`` / ``_step``, ``_observe``, ...) and settings (``num_envs``,
    ``group_size``, ...), over runtime state of its own (:meth:`__init__`)."""

    def __init__(self) -> None:
        """The runtime state (initial-state sampler, running and finished episodes, frames) over the settings that
        :meth:`Env.__init__` has set (it calls this last)."""
        self._states = ResetStateSampler(
            self._count_reset_states,
            self.task_ids,
            self.seed,
            self.is_eval,
            self.task_id_filter,
            self.reset_state_id_filter,
            owner=type(self).__name__,
        )
        self.capture_frames = False
        self._frames: list[dict[str, Any]] = []
        self._built = False
        self._episodes = [_Episode() for _ in range(self.num_envs)]
        self._finished: list[dict[str, Any]] = []

    def _count_reset_states(self) -> int:
        return self.num_reset_states

    @property
    def unwrapped(self) -> EnvRuntime:
        return self

    def shard(self, index: int, count: int) -> None:
        """Use only every ``count``-th initial state starting at ``index`` (ranks, workers)."""
        self._states.shard(index, count)

    def close(self) -> None:
        """Release simulator resources (:meth:`_close`, if built); the next reset builds again."""
        if self._built:
            self._close()
            self._built = False

    @property
    def pool(self) -> np.ndarray:
        """Reset state ids this env draws from (after the filters and sharding)."""
        return self._states.pool

    @property
    def eval_finished(self) -> bool:
        """Eval mode: every reset state of the pool was visited and no episode is running."""
        return self._states.exhausted and not any(e.live for e in self._episodes)

    @property
    def live_envs(self) -> np.ndarray:
        """``bool [B]``: sub-envs in a running episode."""
        return np.array([e.live for e in self._episodes], dtype=bool)

    @property
    def any_live(self) -> bool:
        """Some sub-env is in a running episode."""
        return any(e.live for e in self._episodes)

    def restart_pool(self) -> None:
        """Eval mode: visit the whole pool again (another eval pass)."""
        self._states.restart()

    def sampler_state(self) -> dict[str, Any]:
        """State of the initial-state sampler (saved in checkpoints so a resume continues it)."""
        return self._states.state()

    def load_sampler_state(self, state: dict[str, Any]) -> None:
        self._states.load_state(state)

    def ensure_built(self) -> None:
        if not self._built:
            self._build()
            self._built = True

    @observed
    def reset(self, reset_state_ids: np.ndarray | None = None) -> Observation:
        """Start new episodes in every sub-env and return the first observation.

        Args:
            reset_state_ids: ``int64 [B]`` explicit initial states; default: drawn from the pool,
                one per group, repeated ``group_size`` times on consecutive sub-envs.
        """
        self.ensure_built()
        if reset_state_ids is None:
            ids = np.repeat(self._states.draw(self.num_envs // self.group_size), self.group_size)
        else:
            ids = np.asarray(reset_state_ids, dtype=np.int64)
            if ids.shape != (self.num_envs,):
                raise ValueError(f"reset_state_ids must have shape [{self.num_envs}], got {ids.shape}")
        self._start(np.arange(self.num_envs), ids)
        obs = self._observe(np.arange(self.num_envs))
        self._check_obs(obs, self.num_envs)
        if self.capturing:
            ids = self._video_env_ids()
            self._record_frame(obs.main_images[ids].cpu().numpy(), np.zeros(len(ids)), np.zeros(len(ids), bool))
        return obs

    def _start(self, env_ids: np.ndarray, ids: np.ndarray) -> None:
        active = ids >= 0
        if active.any():
            self._reset_envs(env_ids[active], ids[active])
        for e, rid in zip(env_ids, ids):
            self._episodes[e] = _Episode(reset_state_id=int(rid), live=bool(rid >= 0))

    @property
    def reset_state_ids(self) -> np.ndarray:
        """``int64 [B]`` initial state of the current episode of each sub-env (-1: idle)."""
        return np.array([e.reset_state_id for e in self._episodes], dtype=np.int64)

    @observed
    def chunk_step(self, actions: torch.Tensor | np.ndarray) -> ChunkStepResult:
        """Execute an action chunk ``[B, C, D]`` (env scale) in every sub-env."""
        acts = actions.detach().cpu().float().numpy() if torch.is_tensor(actions) else np.asarray(actions, np.float32)
        if acts.ndim != 3 or acts.shape[0] != self.num_envs or acts.shape[2] != self.action_dim:
            raise ValueError(
                f"{type(self).__name__}.chunk_step expects actions [B={self.num_envs}, C, D={self.action_dim}], "
                f"got {list(acts.shape)}"
            )
        B, C, _ = acts.shape
        live0 = np.array([e.live for e in self._episodes])
        reset_ids = self.reset_state_ids
        raw_r, raw_t, raw_s, frames = self._chunk(acts, live0)

        rewards = np.zeros((B, C), np.float32)
        term = np.zeros((B, C), bool)
        trunc = np.zeros((B, C), bool)
        success = np.zeros((B, C), bool)
        valid = np.zeros((B, C), bool)
        for b, ep in enumerate(self._episodes):
            for c in range(C):
                if not ep.live:
                    break
                valid[b, c] = True
                rewards[b, c] = raw_r[b, c]
                success[b, c] = raw_s[b, c]
                ep.ret += float(raw_r[b, c])
                ep.length += 1
                ep.success_now = bool(raw_s[b, c])
                ep.success_once |= ep.success_now
                if raw_t[b, c] and not self.ignore_terminations:
                    term[b, c] = True
                elif ep.length >= self.max_episode_steps:
                    trunc[b, c] = True
                if term[b, c] or trunc[b, c]:
                    self._finish(b, ep, truncated=bool(trunc[b, c]))
        if frames:
            for c, frame in enumerate(frames):
                self._record_frame(frame, rewards[:, c], success[:, c])

        final_obs = final_ids = None
        truncated_envs = np.nonzero(trunc.any(1))[0]
        if len(truncated_envs):
            final_obs = self._observe(truncated_envs)
            final_ids = torch.as_tensor(truncated_envs, dtype=torch.long)
        if self.auto_reset:
            done_envs = np.nonzero((term | trunc).any(1))[0]
            if len(done_envs):
                self._start(done_envs, self._states.draw(len(done_envs)))
        obs = self._observe(np.arange(B))
        self._check_obs(obs, B)
        return ChunkStepResult(
            obs=obs,
            rewards=torch.from_numpy(rewards),
            terminations=torch.from_numpy(term),
            truncations=torch.from_numpy(trunc),
            success=torch.from_numpy(success),
            valid=torch.from_numpy(valid),
            final_obs=final_obs,
            final_obs_env_ids=final_ids,
            reset_state_ids=torch.from_numpy(reset_ids),
        )

    def _finish(self, b: int, ep: _Episode, truncated: bool) -> None:
        ep.live = False
        self._finished.append(self._episode_record(ep, truncated))

    def _episode_record(self, ep: _Episode, truncated: bool) -> dict[str, Any]:
        return {
            "reset_state_id": ep.reset_state_id,
            "task_id": int(self.task_ids(np.array([ep.reset_state_id]))[0]),
            "success_once": float(ep.success_once),
            "success_at_end": float(ep.success_now),
            "return": ep.ret,
            "episode_len": ep.length,
            "reward": ep.ret / max(ep.length, 1),
            "truncated": truncated,
            **ep.info,
        }

    def flush_episodes(self) -> None:
        """Close still-running episodes (end of a rollout epoch without auto-reset)."""
        for b, ep in enumerate(self._episodes):
            if ep.live and ep.length > 0:
                self._finish(b, ep, truncated=True)

    def pop_episodes(self) -> list[dict[str, Any]]:
        """Records of the episodes finished since the last call (``success_once``, ``return``, …)."""
        out, self._finished = self._finished, []
        return out

    # ------------------------------------------------------------------ frames
    def _frame_buffer(self) -> list[dict[str, Any]]:
        """The list :meth:`pop_frames` empties."""
        return self._frames

    def _video_env_ids(self) -> np.ndarray:
        return np.arange(min(self.num_envs, self.video_cfg.max_envs))

    def _record_frame(self, images: np.ndarray, rewards: np.ndarray, success: np.ndarray) -> None:
        n = len(images)
        self._frames.append({"images": images, "rewards": np.asarray(rewards)[:n], "success": np.asarray(success)[:n]})

    def pop_frames(self) -> list[dict[str, Any]]:
        """Frames captured since the last call while ``capture_frames`` was on.

        Each item: ``images uint8 [V, H, W, 3]``, ``rewards [V]``, ``success [V]`` for the first
        ``V = min(num_envs, video_cfg.max_envs)`` sub-envs.
        """
        out, self._frames = self._frames, []
        return out

    # ------------------------------------------------------------------ helpers
    def _check_obs(self, obs: Observation, n: int) -> None:
        if not isinstance(obs, Observation) or len(obs) != n:
            raise TypeError(f"{type(self).__name__}._observe must return an Observation with {n} rows")

    def clone(self, **overrides: Any) -> EnvRuntime:
        """A new, unbuilt env of the same class and arguments, with ``overrides`` applied."""
        args, kwargs = self._init_args
        return type(self)(*args, **{**kwargs, **overrides})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, group_size={self.group_size}, is_eval={self.is_eval})"
