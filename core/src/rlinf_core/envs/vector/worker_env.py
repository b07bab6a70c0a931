"""``WorkerEnv``: any :class:`~rlinf_core.Env` run in ``num_workers`` worker processes, behind the same interface.

The RL loop applies it (:func:`vectorize`) to its envs when ``rollout.env_workers > 0``; a plugin's env never
knows about processes. Process management, restarts and the shared-memory merge are in
:mod:`rlinf_core.envs.vector.workers`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from rlinf_core.contracts.batched_env import BatchedEnv, VideoConfig
from rlinf_core.contracts.env import ChunkStepResult, Env, observed
from rlinf_core.contracts.observation import Observation
from rlinf_core.envs.vector.worker_main import _FINAL_SLOT, _OBS_SLOT
from rlinf_core.envs.vector.workers import EnvWorkerPool, _Worker

__all__ = ["WorkerEnv", "vectorize"]


class WorkerEnv(EnvWorkerPool, BatchedEnv):
    """An env whose ``num_envs`` sub-envs run in ``num_workers`` worker processes.

    It implements :class:`~rlinf_core.contracts.batched_env.BatchedEnv` as ``env`` does: the settings
    (``num_envs``, ``video_cfg``, ``task_names``, ...) are read from ``env``, which never builds a simulator in this
    process; a plugin's own extras are on :attr:`unwrapped` (and read the simulator only in-process). Each worker
    builds ``env.clone(num_envs=B // W)`` sharded to every ``W``-th initial state.

    Args:
        env: the env to run in workers.
        num_workers: the worker processes (>= 1); ``num_envs`` must split into them in whole GRPO groups.
    """

    def __init__(self, env: Env, num_workers: int) -> None:
        if isinstance(env, WorkerEnv):
            raise TypeError("WorkerEnv(env): env already runs in worker processes")
        if env.in_process_only:
            raise ValueError(
                f"{type(env).__name__} runs in the training process (it holds models on the training device): "
                f"set rollout.env_workers: 0 (got {num_workers} workers)"
            )
        super().__init__(env, num_workers)
        self.step_observers = ()
        self.capture_frames = False

    # ------------------------------------------------------------------ the env's settings
    @property
    def num_workers(self) -> int:
        """The worker processes."""
        return len(self.workers)

    @property
    def unwrapped(self) -> Env:
        return self.env

    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    @property
    def group_size(self) -> int:
        return self.env.group_size

    @property
    def auto_reset(self) -> bool:
        return self.env.auto_reset

    @property
    def ignore_terminations(self) -> bool:
        return self.env.ignore_terminations

    @property
    def max_episode_steps(self) -> int:
        return self.env.max_episode_steps

    @property
    def seed(self) -> int:
        return self.env.seed

    @property
    def is_eval(self) -> bool:
        return self.env.is_eval

    @property
    def task_id_filter(self) -> list[int] | None:
        return self.env.task_id_filter

    @property
    def reset_state_id_filter(self) -> list[int] | None:
        return self.env.reset_state_id_filter

    @property
    def action_dim(self) -> int:
        return self.env.action_dim

    @property
    def episode_metrics(self) -> tuple[str, ...]:
        return self.env.episode_metrics

    @property
    def video_cfg(self) -> VideoConfig:
        return self.env.video_cfg

    @property
    def num_reset_states(self) -> int:
        return self.env.num_reset_states

    def task_ids(self, reset_state_ids: np.ndarray) -> np.ndarray:
        return self.env.task_ids(reset_state_ids)

    @property
    def task_names(self) -> list[str]:
        return self.env.task_names

    def _frame_buffer(self) -> list[dict[str, Any]]:
        return self._frames

    @property
    def pool(self) -> np.ndarray:
        return self.env.pool

    # ------------------------------------------------------------------ the Env API, on the workers
    def ensure_built(self) -> None:
        self._simple("build")

    @observed
    def reset(self, reset_state_ids: np.ndarray | None = None) -> Observation:
        ids = None if reset_state_ids is None else np.asarray(reset_state_ids, dtype=np.int64)
        if ids is not None and ids.shape != (self.env.num_envs,):
            raise ValueError(f"reset_state_ids must have shape [{self.env.num_envs}], got {ids.shape}")
        args = [(None if ids is None else ids[w.lo : w.hi], self._capture_for(w)) for w in self.workers]
        replies = self._call_all("reset", args)
        parts, frames = [None] * len(self.workers), [[] for _ in self.workers]
        for i, (w, (kind, payload)) in enumerate(zip(self.workers, replies)):
            while kind != "ok":
                self._handle_failure(w, "reset", payload)
                self._send(w, "reset", args[i])
                kind, payload = self._recv(w, "reset")
            self._absorb(w, payload)
            parts[i] = self._read(w, _OBS_SLOT, payload["obs"])
            frames[i] = payload["frames"]
        self._merge_frames(frames)
        return self._merge(parts)

    @observed
    def chunk_step(self, actions: torch.Tensor | np.ndarray) -> ChunkStepResult:
        env = self.env
        acts = actions.detach().cpu().float().numpy() if torch.is_tensor(actions) else np.asarray(actions, np.float32)
        if acts.ndim != 3 or acts.shape[0] != env.num_envs or acts.shape[2] != env.action_dim:
            raise ValueError(
                f"{type(env).__name__}.chunk_step expects actions [B={env.num_envs}, C, D={env.action_dim}], "
                f"got {list(acts.shape)}"
            )
        C = acts.shape[1]
        replies = self._call_all("chunk_step", [(acts[w.lo : w.hi], self._capture_for(w)) for w in self.workers])
        arrays, parts, finals, final_ids, frames = [], [], [], [], []
        for w, (kind, payload) in zip(self.workers, replies):
            if kind != "ok":
                prev_ids = w.status["reset_state_ids"] if w.status is not None else np.full(w.num_envs, -1)
                obs_part = self._recover(w, payload)
                arrays.append(_dropped_arrays(w.num_envs, C, prev_ids))
                parts.append(obs_part)
                frames.append([])
                continue
            self._absorb(w, payload)
            arrays.append(payload["arrays"])
            parts.append(self._read(w, _OBS_SLOT, payload["obs"]))
            frames.append(payload["frames"])
            if "final" in payload:
                finals.append(self._read(w, _FINAL_SLOT, payload["final"]))
                final_ids.append(payload["final_ids"] + w.lo)
        self._merge_frames(frames)
        cat = {k: torch.from_numpy(np.concatenate([a[k] for a in arrays])) for k in arrays[0]}
        return ChunkStepResult(
            obs=self._merge(parts),
            rewards=cat["rewards"],
            terminations=cat["terminations"],
            truncations=cat["truncations"],
            success=cat["success"],
            valid=cat["valid"],
            final_obs=self._merge(finals) if finals else None,
            final_obs_env_ids=torch.from_numpy(np.concatenate(final_ids)).long() if final_ids else None,
            reset_state_ids=cat["reset_state_ids"],
        )

    def _recover(self, worker: _Worker, payload: str) -> dict[str, Any]:
        """Restart a worker that failed mid-chunk and return observation rows for its slots."""
        cmd = "chunk_step"
        while True:
            self._handle_failure(worker, cmd, payload)
            # auto-reset envs continue with fresh episodes; others stay idle until the next reset()
            cmd = "reset" if self.auto_reset else "idle"
            self._send(worker, cmd, (None, False) if cmd == "reset" else (None,))
            kind, payload = self._recv(worker, cmd)
            if kind == "ok":
                self._absorb(worker, payload, succeeded=False)
                return self._read(worker, _OBS_SLOT, payload["obs"])

    def _simple(self, cmd: str, per_worker_args: list[tuple] | None = None) -> list[dict[str, Any]]:
        args = per_worker_args or [()] * len(self.workers)
        replies = self._call_all(cmd, args)
        out = []
        for i, (w, (kind, payload)) in enumerate(zip(self.workers, replies)):
            while kind != "ok":
                self._handle_failure(w, cmd, payload)
                self._send(w, cmd, args[i])
                kind, payload = self._recv(w, cmd)
            self._absorb(w, payload)
            out.append(payload)
        return out

    def flush_episodes(self) -> None:
        self._simple("flush_episodes")

    def pop_episodes(self) -> list[dict[str, Any]]:
        out, self._episodes = self._episodes, []
        return out

    def pop_frames(self) -> list[dict[str, Any]]:
        out, self._frames = self._frames, []
        return out

    def restart_pool(self) -> None:
        self._simple("restart_pool")

    def shard(self, index: int, count: int) -> None:
        self.env.shard(index, count)
        if self._started:
            self._simple("shard", [self._worker_shard(w.index) for w in self.workers])

    def sampler_state(self) -> dict[str, Any]:
        return {"workers": [p["value"] for p in self._simple("sampler_state")]}

    def load_sampler_state(self, state: dict[str, Any]) -> None:
        states = state.get("workers")
        if states is None or len(states) != len(self.workers):
            warnings.warn(
                f"not restoring the initial-state sampler of {type(self.env).__name__}: the checkpoint has "
                f"{'no' if states is None else len(states)} worker states, this env has {len(self.workers)} workers",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._simple("load_sampler_state", [(s,) for s in states])

    def pop_metrics(self) -> dict[str, float]:
        """``env/worker_restarts`` and ``env/dropped_episodes`` since the last call."""
        out = {"env/worker_restarts": float(self._restarts), "env/dropped_episodes": float(self._dropped)}
        self._restarts = self._dropped = 0
        return out

    def _statuses(self) -> list[dict[str, Any]]:
        if any(w.status is None for w in self.workers):
            self._simple("ping")
        return [w.status for w in self.workers]

    @property
    def eval_finished(self) -> bool:
        return all(s["eval_finished"] for s in self._statuses())

    @property
    def live_envs(self) -> np.ndarray:
        return np.concatenate([s["live"] for s in self._statuses()])

    @property
    def any_live(self) -> bool:
        return any(bool(s["live"].any()) for s in self._statuses())

    @property
    def reset_state_ids(self) -> np.ndarray:
        return np.concatenate([s["reset_state_ids"] for s in self._statuses()])

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [w.process.pid for w in self.workers if w.process is not None]

    def clone(self, **overrides: Any) -> WorkerEnv:
        """A new env of the same arguments with ``overrides``, in as many worker processes of its own."""
        return WorkerEnv(self.env.clone(**overrides), self.num_workers)

    def __repr__(self) -> str:
        return f"WorkerEnv({self.env!r}, num_workers={self.num_workers})"


def vectorize(env: Env | WorkerEnv | None, num_workers: int = 0) -> Env | WorkerEnv | None:
    """``env`` in ``num_workers`` worker processes when ``num_workers > 0``, else ``env`` itself (also ``None``, and an
    env that already runs in workers)."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if env is None or isinstance(env, WorkerEnv) or num_workers == 0:
        return env
    return WorkerEnv(env, num_workers)


def _dropped_arrays(n: int, C: int, reset_state_ids: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "rewards": np.zeros((n, C), np.float32),
        "terminations": np.zeros((n, C), bool),
        "truncations": np.zeros((n, C), bool),
        "success": np.zeros((n, C), bool),
        "valid": np.zeros((n, C), bool),
        "reset_state_ids": np.asarray(reset_state_ids, np.int64),
    }
