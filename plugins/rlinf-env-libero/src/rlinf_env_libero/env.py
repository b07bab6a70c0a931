"""LIBERO as an rlinf :class:`~rlinf_core.Env`: a task x trial grid of shipped initial states, reused simulators."""

from __future__ import annotations

import zlib
from typing import Literal

import numpy as np
import torch

from rlinf_core.contracts import Env, Observation, StepResult
from rlinf_env_libero.settings import FLAT_KEYS, LiberoRenderConfig, LiberoRewardConfig, LiberoSimConfig
from rlinf_env_libero.suites import MAX_EPISODE_STEPS, check_suite, load_init_states, load_tasks, num_init_states

STATE_DIM = 8


class LiberoEnv(Env):
    """The LIBERO benchmark (robosuite 1.4, MuJoCo): a Panda arm, 7-D delta end-effector actions.

    A reset state id is a flat ``(task_id, trial_id)`` index, ``task_id * trials_per_task +
    trial_id``, over LIBERO's shipped initial states (50 per task). Training draws ids from the
    core's seeded permutation (GRPO groups repeat one id on consecutive sub-envs); ``is_eval``
    visits every (task, trial) of the (sharded) pool exactly once. Success is LIBERO's goal
    predicate, checked after every step; it ends the episode unless ``ignore_terminations``.

    Observations: ``main_images`` from the ``agentview`` camera (and ``wrist_images`` from
    ``robot0_eye_in_hand``) in the orientation OpenVLA-style policies were trained with (MuJoCo's
    bottom-up frames rotated by 180 degrees), ``states`` = end-effector position (3) +
    axis-angle (3) + gripper finger positions (2), and the task instruction. Images are rendered
    only at chunk boundaries.

    Actions are robosuite's, as rlinf's contract says (env scale): the gripper is -1 open, +1
    close. Policies trained with another convention map it themselves, exactly once (OpenVLA /
    OpenVLA-OFT LIBERO checkpoints: ``invert_gripper: true``, :mod:`rlinf_core.models.conventions`).

    Simulators: each sub-env runs one robosuite simulator in this process. A reset to a task the
    sub-env already simulates is a soft reset plus ``set_init_state`` (milliseconds, no rebuild);
    a simulator is built only when a sub-env needs a task it does not hold and no idle simulator
    of that task is cached (``sim.cache_size``, shared by the LiberoEnvs of the process).

    Args:
        task_suite_name: ``libero_spatial``, ``libero_object``, ``libero_goal``, ``libero_10``,
            ``libero_90`` or ``libero_130`` (all 130 tasks: spatial, object, goal, 90, 10 in that
            order, task ids 0-9, 10-19, 20-29, 30-119, 120-129).
        max_episode_steps: truncation limit, in env steps; default per suite: 240 (spatial,
            object), 320 (goal), 512 (10, 90, 130).
        trials_per_task: use only the first N shipped initial states of every task (default: all
            50). Smaller grids give quick evals.
        render: what the cameras render (:class:`~rlinf_env_libero.settings.LiberoRenderConfig`: ``image_size``,
            ``use_wrist_image``, ``obs_mode``, ``fast_render``, ``gl_backend``).
        reward: how a step is rewarded (:class:`~rlinf_env_libero.settings.LiberoRewardConfig`: ``coef``,
            ``relative``).
        sim: how the simulators start an episode and how many this process keeps
            (:class:`~rlinf_env_libero.settings.LiberoSimConfig`: ``settle_steps``, ``settle_gripper``,
            ``placement_seed``, ``cache_size``, ``scene_cache_size``).
        **kwargs: :class:`rlinf_core.Env` arguments (``num_envs`` per rank, ``group_size``,
            ``auto_reset``, ``ignore_terminations``, ``seed``, ``is_eval``, ``task_id_filter``,
            ``video_cfg``, ...).
    """

    action_dim = 7
    FLAT_SETTINGS = FLAT_KEYS

    def __init__(
        self,
        task_suite_name: Literal[
            "libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90", "libero_130"
        ] = "libero_spatial",
        max_episode_steps: int | None = None,
        trials_per_task: int | None = None,
        render: LiberoRenderConfig = LiberoRenderConfig(),
        reward: LiberoRewardConfig = LiberoRewardConfig(),
        sim: LiberoSimConfig = LiberoSimConfig(),
        **kwargs,
    ) -> None:
        if "gripper_action" in kwargs:
            raise ValueError(
                "LiberoEnv takes robosuite-scale actions (gripper -1 open, +1 close) and no longer maps the gripper;"
                " map it in the policy instead (OpenVLA / OpenVLA-OFT: invert_gripper: true)"
            )
        check_suite(task_suite_name)
        if max_episode_steps is None:
            max_episode_steps = MAX_EPISODE_STEPS[task_suite_name]
        super().__init__(max_episode_steps=max_episode_steps, **kwargs)
        if trials_per_task is not None and trials_per_task < 1:
            raise ValueError(f"trials_per_task must be >= 1 (or null for all), got {trials_per_task}")
        self.task_suite_name = task_suite_name
        self.trials_per_task = trials_per_task
        self.render = render
        self.reward = reward
        self.sim = sim
        #: simulators this env built (a reset that reuses one does not count).
        self.num_sim_builds = 0
        #: camera images rendered so far.
        self.num_renders = 0
        self._offsets: np.ndarray | None = None

    # ------------------------------------------------------------------ index of initial states
    @property
    def tasks(self):
        """:class:`~rlinf_env_libero.suites.TaskInfo` per task id."""
        return load_tasks(self.task_suite_name)

    def _trial_offsets(self) -> np.ndarray:
        if self._offsets is None:
            counts = [num_init_states(t) for t in self.tasks]
            if self.trials_per_task is not None:
                counts = [min(c, self.trials_per_task) for c in counts]
            self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return self._offsets

    @property
    def num_reset_states(self) -> int:
        return int(self._trial_offsets()[-1])

    def task_ids(self, reset_state_ids) -> np.ndarray:
        ids = np.asarray(reset_state_ids, dtype=np.int64)
        return np.searchsorted(self._trial_offsets(), ids, side="right") - 1

    def trial_ids(self, reset_state_ids) -> np.ndarray:
        """Trial id (index of the shipped initial state within its task) of each reset state id."""
        ids = np.asarray(reset_state_ids, dtype=np.int64)
        return ids - self._trial_offsets()[self.task_ids(ids)]

    def reset_state_id(self, task_id: int, trial_id: int) -> int:
        """The flat id of ``(task_id, trial_id)``."""
        offsets = self._trial_offsets()
        if not (0 <= task_id < len(offsets) - 1 and 0 <= trial_id < offsets[task_id + 1] - offsets[task_id]):
            raise ValueError(f"no (task {task_id}, trial {trial_id}) in {self.task_suite_name}")
        return int(offsets[task_id] + trial_id)

    @property
    def task_names(self) -> list[str]:
        """``<suite>/<LIBERO task name>`` per task id (the prefix groups ``libero_130`` per suite)."""
        return [f"{t.suite}/{t.name}" for t in self.tasks]

    @property
    def task_suites(self) -> list[str]:
        """The source suite of each task id (for per-suite success rates of ``libero_130``)."""
        return [t.suite for t in self.tasks]

    @property
    def instructions(self) -> list[str]:
        """The instruction of each task id."""
        return [t.language for t in self.tasks]

    # ------------------------------------------------------------------ simulators
    def _build(self) -> None:
        from rlinf_env_libero import _sim

        _sim.setup_gl(self.render.gl_backend)
        _sim.import_robosuite()
        self._sim_mod = _sim
        self._slots: list = [None] * self.num_envs
        self._slot_task = np.full(self.num_envs, -1, dtype=np.int64)
        self._prev_success = np.zeros(self.num_envs, dtype=bool)

    def _key(self, task_id: int) -> tuple:
        rendered = self.render.obs_mode == "rgb"
        return (self.tasks[task_id].bddl_file, rendered, self.render.fast_render and rendered)

    def _new_sim(self, task_id: int):
        task = self.tasks[task_id]
        self._sim_mod.SCENES.trim(self.sim.scene_cache_size)
        try:
            sim = self._sim_mod.LiberoSim(
                task.bddl_file, render=self.render.obs_mode == "rgb", fast_render=self.render.fast_render
            )
        except Exception as exc:
            raise RuntimeError(
                f"building the LIBERO simulator of {task.suite} task {task.index} ({task.name}) failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self.num_sim_builds += 1
        return sim

    def simulator(self, env_id: int):
        """The :class:`~rlinf_env_libero._sim.LiberoSim` of sub-env ``env_id`` (None before its first episode)."""
        self.ensure_built()
        return self._slots[env_id]

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        n = self.num_reset_states
        bad = [int(r) for r in reset_state_ids if not 0 <= r < n]
        if bad:
            raise ValueError(f"reset state ids {bad} out of range [0, {n}) for {self.task_suite_name}")
        env_ids = [int(e) for e in env_ids]
        task_ids = [int(t) for t in self.task_ids(reset_state_ids)]
        pool = self._sim_mod.POOL
        for e, t in zip(env_ids, task_ids):  # give back simulators of tasks no longer needed here
            sim = self._slots[e]
            if sim is not None and sim.key != self._key(t):
                pool.release(sim)
                self._slots[e] = None
        missing = []
        for e, t in zip(env_ids, task_ids):
            if self._slots[e] is None:
                self._slots[e] = pool.take(self._key(t))
                if self._slots[e] is None:
                    missing.append((e, t))
        pool.trim(self.sim.cache_size)  # before building, so evicted simulators free their memory first
        for e, t in missing:
            self._slots[e] = self._new_sim(t)
        for e, t, trial in zip(env_ids, task_ids, self.trial_ids(reset_state_ids).tolist()):
            task = self.tasks[t]
            seed = zlib.crc32(f"{task.name}/{trial}".encode())
            if self.sim.placement_seed == "rlinf":
                seed = (self.seed + self._states.shard_spec[0]) * len(env_ids) + e
            self._slots[e].reset_to(
                load_init_states(task.suite, task.index)[trial], self.sim.settle_steps, seed, self.sim.settle_gripper
            )
            self._slot_task[e] = t
            self._prev_success[e] = False

    def _step(self, actions: np.ndarray, live: np.ndarray) -> StepResult:
        B = self.num_envs
        rewards = np.zeros(B, np.float32)
        success = np.zeros(B, bool)
        live_ids = np.nonzero(live)[0]
        if not np.isfinite(actions[live_ids]).all():
            bad = live_ids[~np.isfinite(actions[live_ids]).all(axis=1)].tolist()
            raise ValueError(f"LiberoEnv got non-finite actions for sub-envs {bad}")
        acts = np.asarray(actions, dtype=np.float64)
        for e in live_ids.tolist():
            sim = self._slots[e]
            try:
                success[e] = sim.step(acts[e])
            except Exception as exc:
                task = self.tasks[self._slot_task[e]]
                raise RuntimeError(
                    f"LIBERO simulator of sub-env {e} ({task.suite} task {task.index}, reset state "
                    f"{self.reset_state_ids[e]}) failed at step {sim.steps}: {type(exc).__name__}: {exc}"
                ) from exc
            if self.reward.relative:
                rewards[e] = self.reward.coef * (float(success[e]) - float(self._prev_success[e]))
            else:
                rewards[e] = self.reward.coef * float(success[e])
            self._prev_success[e] = success[e]
        return StepResult(rewards=rewards, terminated=success.copy(), success=success)

    def _observe(self, env_ids: np.ndarray) -> Observation:
        env_ids = [int(e) for e in env_ids]
        n = len(env_ids)
        size = self.render.image_size if self.render.obs_mode == "rgb" else 1
        main = np.zeros((n, size, size, 3), np.uint8)
        wrist = np.zeros((n, size, size, 3), np.uint8) if self.render.use_wrist_image else None
        states = np.zeros((n, STATE_DIM), np.float32)
        descriptions = []
        for i, e in enumerate(env_ids):
            sim = self._slots[e]
            if sim is None:  # an idle eval slot that never started an episode
                descriptions.append(self.instructions[int(self.task_ids(self.pool[:1])[0])])
                continue
            descriptions.append(self.tasks[self._slot_task[e]].language)
            if self.render.obs_mode == "rgb":
                main[i] = sim.render("agentview", size)
                self.num_renders += 1
                if wrist is not None:
                    wrist[i] = sim.render("robot0_eye_in_hand", size)
                    self.num_renders += 1
            states[i] = sim.proprio()
        return Observation(
            main_images=torch.from_numpy(main),
            task_descriptions=descriptions,
            wrist_images=torch.from_numpy(wrist) if wrist is not None else None,
            states=torch.from_numpy(states),
        )

    def _close(self) -> None:
        """Hand this env's simulators to the process's idle cache (then trimmed to ``sim.cache_size``)."""
        for e, sim in enumerate(self._slots):
            if sim is not None:
                self._sim_mod.POOL.release(sim)
                self._slots[e] = None
        self._sim_mod.POOL.trim(self.sim.cache_size)
