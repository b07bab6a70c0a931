"""The batched, action-chunk-aware environment contract.

An :class:`Env` holds ``num_envs`` sub-environments. The base class owns everything that is the
same for every simulator: episode bookkeeping, ``auto_reset`` / ``ignore_terminations``, GRPO
groups sharing one initial state, the eval grid that visits every reset state exactly once, and
frame capture for videos. A simulator plugin implements five small methods:

``_build()``
    create the simulator(s); called lazily on the first :meth:`reset`, so that ``--print_config``
    and ``rlinf plugins`` never start a simulator.
``_reset_envs(env_ids, reset_state_ids)``
    put sub-envs ``env_ids`` (``int64 [n]``) into initial states ``reset_state_ids`` (``int64 [n]``).
``_step(actions, live)``
    advance every sub-env by one step with ``actions`` (``float32 [B, D]``, env scale); ``live``
    (``bool [B]``) marks sub-envs whose result is used (others may be skipped). Returns a
    :class:`StepResult` ``(rewards float [B], terminated bool [B], success bool [B])``.
``_observe(env_ids)``
    render an :class:`Observation` for those sub-envs. Called only at chunk boundaries (and every
    sub-step while a video is being recorded), never on every physics step.
``num_reset_states`` / ``task_ids(reset_state_ids)``
    the flat (task_id, trial_id) index of initial states.
``_close()`` (optional)
    release the simulator(s); called by :meth:`close` only after a build, which then marks the env
    unbuilt (the next reset builds again).

Extra per-episode metrics (ManiSkill's ``fail_once``) are declared in ``episode_metrics`` and set with
:meth:`episode_info` from ``_step``; plugins never touch the base's private episode state.

A reset state id is a flat index ``task_id * trials_per_task + trial_id`` (envs may define their
own mapping through :meth:`task_ids`).

This module is the contract only: the hooks above, documented, plus ``episode_info``; the public API built on
them (``reset``, ``chunk_step``, episodes, frames, ``clone``) is :class:`rlinf_core.contracts.env_runtime.EnvRuntime`,
the base class. An env runs its sub-envs in this process: how many processes run them is not the env's business.
Worker processes are a wrapper, :class:`rlinf_core.envs.vector.WorkerEnv`, that the RL loop applies when its
``rollout.env_workers > 0`` (:func:`rlinf_core.envs.vector.vectorize`); the two share one typed interface,
:class:`rlinf_core.contracts.batched_env.BatchedEnv`. Initial-state sampling lives in
:mod:`rlinf_core.contracts.reset_states` and the step result in :mod:`rlinf_core.contracts.observation`.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np
import torch

from rlinf_core.contracts.batched_env import VideoConfig
from rlinf_core.contracts.env_runtime import EnvRuntime, observed
from rlinf_core.contracts.observation import ChunkStepResult, Observation, StepResult

__all__ = ["ChunkStepResult", "Env", "StepResult", "VideoConfig", "observed"]


class Env(EnvRuntime):
    """Base class of batched, action-chunk environments.

    Args:
        num_envs: sub-environments in this env (per rank; per pipeline stage it is divided).
        group_size: consecutive sub-envs that start from the same initial state (GRPO groups).
        auto_reset: reset a finished sub-env at the end of the chunk it finished in; otherwise it
            stays finished (``valid`` False) until the next :meth:`reset`.
        ignore_terminations: success never ends an episode; episodes run to ``max_episode_steps``
            and ``success_at_end`` is recorded.
        max_episode_steps: truncation limit, in env steps.
        seed: seed of the initial-state draws and of the simulator.
        is_eval: eval mode: visit every reset state of the (sharded) pool exactly once, in order;
            slots with nothing left to visit stay idle.
        task_id_filter: restrict initial states to these task ids.
        reset_state_id_filter: restrict initial states to these flat reset state ids (e.g. one
            pinned state, RLinf's ``specific_reset_id``).
        video_cfg: video recording of this env's rollouts.
    """

    #: D, the size of the actions ``_step`` takes (required: a class attribute, or set in ``__init__``)
    action_dim: int
    #: callables ``observer(env, event, arg, result, frames)`` run after every ``reset`` (``event`` "reset",
    #: ``arg`` its ``reset_state_ids``, ``result`` the Observation) and ``chunk_step`` ("chunk_step", the
    #: actions ``[B, C, D]``, the ChunkStepResult, and the chunk's per-step frames of the first
    #: ``min(num_envs, video_cfg.max_envs)`` sub-envs as in :meth:`pop_frames`); frames are captured while
    #: any is set. Used by :class:`rlinf_core.callbacks.recorder.RolloutRecorder`; assign a new tuple.
    step_observers: tuple = ()
    #: extra per-episode metrics: numeric keys a subclass sets with :meth:`episode_info` (e.g.
    #: ManiSkill's ``fail_once``); the RL loop logs their means as ``env/<key>`` and ``eval/<key>``
    #: (declared up front: every rank must reduce the same keys).
    episode_metrics: tuple[str, ...] = ()
    #: flat setting names → ``(config group, field)`` for an env whose constructor groups its settings (the flat
    #: names RLinf's configs and older configs use, ``{"reward_coef": ("reward", "coef")}``): ``rlinf fit`` names the
    #: grouped key of such a key, and the constructor refuses it with the same hint
    FLAT_SETTINGS: ClassVar[dict[str, tuple[str, str]]] = {}
    #: the env cannot run in worker processes (a world model on the training device):
    #: :class:`rlinf_core.envs.vector.WorkerEnv` refuses it
    in_process_only: ClassVar[bool] = False

    # marked as a wrapper of object.__new__ so that signature readers (jsonargparse) read __init__'s parameters
    @functools.wraps(object.__new__)
    def __new__(cls, *args: Any, **kwargs: Any) -> Env:
        # Record the outermost constructor's arguments for clone(): stage, eval and worker copies of an
        # env are built from the same config with a few overrides (Python passes __new__ what __init__ gets).
        moved = [k for k in kwargs if k in cls.FLAT_SETTINGS]
        if moved:
            group, field = cls.FLAT_SETTINGS[moved[0]]
            raise TypeError(
                f"{cls.__name__} got the flat setting {moved[0]!r}: it is {group}.{field} now (the {group} config "
                f"group: a dataclass in Python, {group}: {{{field}: ...}} in YAML)"
            )
        env = object.__new__(cls)
        env._init_args = (args, dict(kwargs))
        return env

    def __init__(
        self,
        num_envs: int = 1,
        group_size: int = 1,
        auto_reset: bool = False,
        ignore_terminations: bool = False,
        max_episode_steps: int = 100,
        seed: int = 0,
        is_eval: bool = False,
        task_id_filter: list[int] | None = None,
        reset_state_id_filter: list[int] | None = None,
        video_cfg: VideoConfig | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if group_size < 1 or num_envs % group_size:
            raise ValueError(
                f"num_envs ({num_envs}) must be a multiple of group_size ({group_size}): "
                "each GRPO group is group_size consecutive sub-envs"
            )
        if group_size > 1 and auto_reset:
            raise ValueError(
                "group_size > 1 needs auto_reset: false: a group's members must start together from "
                "one initial state, which per-env auto-resets would break"
            )
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.num_envs = num_envs
        self.group_size = group_size
        self.auto_reset = auto_reset
        self.ignore_terminations = ignore_terminations
        self.max_episode_steps = max_episode_steps
        self.seed = seed
        self.is_eval = is_eval
        self.task_id_filter = list(task_id_filter) if task_id_filter is not None else None
        self.reset_state_id_filter = list(reset_state_id_filter) if reset_state_id_filter is not None else None
        self.video_cfg = video_cfg or VideoConfig()
        super().__init__()

    # ------------------------------------------------------------------ to be implemented
    def _build(self) -> None:
        """Create the simulator(s). Called once, on the first reset."""

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        raise NotImplementedError

    def _step(self, actions: np.ndarray, live: np.ndarray) -> StepResult:
        raise NotImplementedError

    def _observe(self, env_ids: np.ndarray) -> Observation:
        raise NotImplementedError

    @property
    def num_reset_states(self) -> int:
        """Size of the flat (task, trial) index of initial states."""
        raise NotImplementedError

    def task_ids(self, reset_state_ids: np.ndarray) -> np.ndarray:
        """Task id of each reset state id (default: one task)."""
        return np.zeros_like(np.asarray(reset_state_ids))

    @property
    def task_names(self) -> list[str]:
        """Human-readable name per task id (for per-task tables)."""
        return [f"task_{i}" for i in range(int(self.task_ids(np.arange(self.num_reset_states)).max()) + 1)]

    def _chunk(
        self, actions: np.ndarray, live: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """Run a whole chunk ``[B, C, D]``; returns rewards/terminated/success ``[B, C]`` and frames.

        The default loops :meth:`_step`, stepping a sub-env only while it is live (not yet done in
        this chunk and under ``max_episode_steps``). Chunk-native simulators (world models)
        override it.
        """
        B, C, _ = actions.shape
        rewards = np.zeros((B, C), np.float32)
        terminated = np.zeros((B, C), bool)
        success = np.zeros((B, C), bool)
        frames = []
        live = live.copy()
        steps = np.array([e.length for e in self._episodes])
        for c in range(C):
            live &= steps + c < self.max_episode_steps
            r, t, s = self._step(actions[:, c], live.copy())
            rewards[:, c], terminated[:, c], success[:, c] = r, t, s
            if not self.ignore_terminations:
                live &= ~np.asarray(t, bool)
            if self.capturing:
                frames.append(self._observe(self._video_env_ids()).main_images.numpy())
        return rewards, terminated, success, frames

    def _close(self) -> None:
        """Release the simulator(s) built by :meth:`_build` (default: nothing to release)."""

    def set_device(self, device: str | torch.device) -> None:
        """Run on ``device`` (the RL module's; set before rollouts and evals). Simulators on the CPU ignore
        it; accelerator simulators (world models) move their models and frames there."""

    # ------------------------------------------------------------------ for the hooks to call
    def episode_info(self, env_id: int, reduce: str = "last", **values: float) -> None:
        """Record extra metrics of sub-env ``env_id``'s running episode (declared in ``episode_metrics``);
        they appear in its episode record and are logged as ``env/<key>`` / ``eval/<key>``.

        Args:
            env_id: the sub-env.
            reduce: how a value combines with the one already recorded in this episode: ``last``,
                ``max`` (e.g. ``fail_once``) or ``sum``.
            values: metric values, e.g. ``fail_once=1.0``.
        """
        unknown = sorted(set(values) - set(self.episode_metrics))
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.episode_info got undeclared metrics {unknown}: add them to the class's "
                f"episode_metrics (declared: {list(self.episode_metrics)})"
            )
        if reduce not in ("last", "max", "sum"):
            raise ValueError(f"episode_info reduce must be 'last', 'max' or 'sum', got {reduce!r}")
        info = self._episodes[env_id].info
        for key, value in values.items():
            value = float(value)
            if key in info and reduce == "max":
                value = max(info[key], value)
            elif key in info and reduce == "sum":
                value = info[key] + value
            info[key] = value
