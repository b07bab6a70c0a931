"""MetaWorld as an rlinf :class:`~rlinf_core.Env`: many task instances in one process, rendered only when looked at."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from rlinf_core.contracts import Env, Observation, StepResult
from rlinf_env_metaworld.settings import FLAT_KEYS, MetaWorldRenderConfig, MetaWorldRewardConfig, MetaWorldSimConfig
from rlinf_env_metaworld.tasks import INSTRUCTIONS, MT50, difficulty_of, resolve_tasks

STATE_DIMS = {"proprio": 4, "full": 39, "none": 0}
#: dimensions of a 7-D VLA action that MetaWorld takes (xyz deltas, gripper); 3-5 are rotations
XYZ_GRIPPER = [0, 1, 2, 6]
_ZERO_ACTION = np.zeros(4, np.float32)


class MetaWorldEnv(Env):
    """MetaWorld (metaworld 3.x, MuJoCo) Sawyer tasks with RGB cameras and language instructions.

    A reset state id is ``task_id * trials_per_task + trial_id``. Trial ``k`` of a task is the
    initial configuration (object and goal positions) that metaworld draws from a generator
    seeded with ``(trial_seed, task, k)``: the same id always gives the same scene, and a
    different ``trial_seed`` gives held-out scenes. Actions are 4-D in [-1, 1]: end-effector
    xyz deltas and the gripper effort. Success comes from metaworld's ``info["success"]`` and
    ends the episode (unless ``ignore_terminations``).

    Images are rendered only in ``_observe``: at chunk boundaries for the policy, and on every
    sub-step only while a video is being recorded.

    Args:
        task_set: ``MT1`` (one task, see ``task_name``), ``MT10``, ``MT50`` or ``ML45``.
        task_name: the task of ``MT1``, e.g. ``pick-place-v3``.
        split: ``train`` or ``test``; ML45's ``test`` split is its 5 held-out tasks.
        tasks: explicit task list (overrides ``task_set``), e.g. ``[reach-v3, push-v3]``.
        trials_per_task: initial configurations per task (the trial axis of the eval grid).
        trial_seed: seed of the initial configurations; use another value for held-out scenes.
        state_type: ``Observation.states``: ``proprio`` (hand xyz + gripper opening, 4-D),
            ``full`` (metaworld's 39-D observation; the goal is zeroed for ML45) or ``none``.
        action_format: ``4d`` (xyz deltas + gripper, metaworld's own) or ``7d`` (a VLA's 7-D action,
            e.g. RLinf's OpenVLA-OFT with 7-D ``meta_world_strict`` norm stats: dimensions 0-2 and
            6 drive the arm, the rotation dimensions 3-5 are ignored, as RLinf does).
        render: what the cameras render (:class:`~rlinf_env_metaworld.settings.MetaWorldRenderConfig`:
            ``image_size``, ``camera_name``, ``wrist_camera_name``, ``flip_corner_cameras``, ``fast_render``,
            ``gl_backend``).
        reward: how a step is rewarded (:class:`~rlinf_env_metaworld.settings.MetaWorldRewardConfig`: ``mode``,
            ``coef``).
        sim: how the simulator starts an episode (:class:`~rlinf_env_metaworld.settings.MetaWorldSimConfig`:
            ``settle_steps``).
        **kwargs: :class:`rlinf_core.Env` arguments (``num_envs``, ``group_size``, ``max_episode_steps``,
            ``seed``, ``is_eval``, ...).
    """

    action_dim = 4
    FLAT_SETTINGS = FLAT_KEYS

    def __init__(
        self,
        task_set: Literal["MT1", "MT10", "MT50", "ML45"] = "MT50",
        task_name: str | None = None,
        split: Literal["train", "test"] = "train",
        tasks: list[str] | None = None,
        trials_per_task: int = 10,
        trial_seed: int = 0,
        state_type: Literal["proprio", "full", "none"] = "proprio",
        action_format: Literal["4d", "7d"] = "4d",
        render: MetaWorldRenderConfig = MetaWorldRenderConfig(),
        reward: MetaWorldRewardConfig = MetaWorldRewardConfig(),
        sim: MetaWorldSimConfig = MetaWorldSimConfig(),
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self._task_list = resolve_tasks(task_set, task_name, split, tasks)
        if trials_per_task < 1:
            raise ValueError(f"trials_per_task must be >= 1, got {trials_per_task}")
        if state_type not in STATE_DIMS:
            raise ValueError(f"state_type must be one of {', '.join(STATE_DIMS)}, got {state_type!r}")
        if action_format not in ("4d", "7d"):
            raise ValueError(f"action_format must be '4d' or '7d', got {action_format!r}")
        self.task_set = task_set
        self.trials_per_task = trials_per_task
        self.trial_seed = trial_seed
        self.state_type = state_type
        self.hide_goal = task_set == "ML45" and not tasks
        self.action_format = action_format
        self.action_dim = 7 if action_format == "7d" else 4
        self.render = render
        self.reward = reward
        self.sim = sim
        #: images rendered so far (one per camera per sub-env observation).
        self.num_renders = 0

    # ------------------------------------------------------------------ index of initial states
    @property
    def num_reset_states(self) -> int:
        return len(self._task_list) * self.trials_per_task

    def task_ids(self, reset_state_ids) -> np.ndarray:
        return np.asarray(reset_state_ids) // self.trials_per_task

    @property
    def task_names(self) -> list[str]:
        return list(self._task_list)

    @property
    def task_difficulties(self) -> list[str]:
        """``easy`` / ``medium`` / ``hard`` / ``very_hard`` per task id (for RLinf's published results table)."""
        return [difficulty_of(t) for t in self._task_list]

    @property
    def instructions(self) -> list[str]:
        """The instruction of each task id."""
        return [INSTRUCTIONS[t] for t in self._task_list]

    def trial_seed_of(self, reset_state_id: int) -> int:
        """The metaworld seed that draws the initial configuration of ``reset_state_id``."""
        task, trial = divmod(int(reset_state_id), self.trials_per_task)
        seq = np.random.SeedSequence([self.trial_seed, MT50.index(self._task_list[task]), trial])
        return int(seq.generate_state(1)[0])

    # ------------------------------------------------------------------ simulator
    def _build(self) -> None:
        from rlinf_env_metaworld import _sim

        _sim.setup_gl(self.render.gl_backend)
        _sim.import_metaworld()
        self._sim_mod = _sim
        render = self.render
        self._cameras = [render.camera_name] + ([render.wrist_camera_name] if render.wrist_camera_name else [])
        self._flip = [render.flip_corner_cameras and c.startswith("corner") for c in self._cameras]
        self._renderer = _sim.SceneRenderer(render.image_size, render.fast_render)
        self._slots: list = [None] * self.num_envs
        self._spare: dict[str, list] = {}
        self._camera_ids: list[int] | None = None
        # last rendered images per sub-env; re-rendered only after the simulator state changed
        self._last_images = np.zeros(
            (len(self._cameras), self.num_envs, render.image_size, render.image_size, 3), np.uint8
        )
        self._stale = np.ones(self.num_envs, bool)

    def _instance(self, task: str):
        spare = self._spare.get(task)
        if spare:
            return spare.pop()
        sim = self._sim_mod.TaskSim(task, self._renderer)
        if self._camera_ids is None:  # every MetaWorld scene has the same cameras
            self._camera_ids = [sim.camera_id(c) for c in self._cameras]
        return sim

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        for e, rid in zip(env_ids.tolist(), reset_state_ids.tolist()):
            task = self._task_list[rid // self.trials_per_task]
            sim = self._slots[e]
            if sim is None or sim.task != task:
                if sim is not None:
                    self._spare.setdefault(sim.task, []).append(sim)
                sim = self._slots[e] = self._instance(task)
            sim.reset(self.trial_seed_of(rid))
            for _ in range(self.sim.settle_steps):
                sim.step(_ZERO_ACTION)
            self._stale[e] = True

    def _step(self, actions: np.ndarray, live: np.ndarray) -> StepResult:
        B = self.num_envs
        rewards = np.zeros(B, np.float32)
        success = np.zeros(B, bool)
        self._stale |= live
        for e in np.nonzero(live)[0]:
            shaped, success[e] = self._slots[e].step(actions[e, XYZ_GRIPPER] if self.action_dim == 7 else actions[e])
            rewards[e] = float(success[e]) if self.reward.mode == "sparse" else shaped / 10.0
        return StepResult(rewards=rewards * self.reward.coef, terminated=success.copy(), success=success)

    def _observe(self, env_ids: np.ndarray) -> Observation:
        n, S = len(env_ids), self.render.image_size
        images = np.zeros((len(self._cameras), n, S, S, 3), np.uint8)
        states = np.zeros((n, STATE_DIMS[self.state_type]), np.float32)
        descriptions = []
        with self._renderer:
            for i, e in enumerate(np.asarray(env_ids).tolist()):
                sim = self._slots[e]
                if sim is None:  # an idle eval slot that never started an episode
                    descriptions.append(INSTRUCTIONS[self._task_list[0]])
                    continue
                descriptions.append(INSTRUCTIONS[sim.task])
                if self._stale[e]:  # finished sub-envs that are not stepped keep their last frame
                    for k, cam_id in enumerate(self._camera_ids):
                        self._renderer.render(sim, cam_id, self._flip[k], self._last_images[k, e])
                        self.num_renders += 1
                    self._stale[e] = False
                images[:, i] = self._last_images[:, e]
                if self.state_type == "proprio":
                    states[i] = sim.obs[:4]
                elif self.state_type == "full":
                    states[i] = sim.obs
                    if self.hide_goal:
                        states[i, -3:] = 0.0
        return Observation(
            main_images=torch.from_numpy(images[0]),
            task_descriptions=descriptions,
            wrist_images=torch.from_numpy(images[1]) if self.render.wrist_camera_name else None,
            states=torch.from_numpy(states) if self.state_type != "none" else None,
        )

    # ------------------------------------------------------------------ scripted experts
    def expert_actions(self, chunk: int = 1) -> torch.Tensor:
        """The scripted expert's next ``chunk`` actions per sub-env, ``float32 [B, chunk, action_dim]``
        (``7d``: rotation dimensions 0).

        Uses metaworld's hand-written policies on the simulator state. For ``chunk > 1`` the
        expert is simulated ahead and the simulator rewound, so ``chunk_step`` of the result
        reproduces the expert's closed-loop trajectory. Sub-envs without a running episode get
        zeros. For demonstrations and tests; policies never see the simulator state. It reads the simulator, so it
        exists on the env itself only (a :class:`~rlinf_core.envs.vector.WorkerEnv` has none).
        """
        self.ensure_built()
        out = np.zeros((self.num_envs, chunk, self.action_dim), np.float32)
        live = self.live_envs
        for e in range(self.num_envs):
            if live[e] and self._slots[e] is not None:
                out[e][:, XYZ_GRIPPER if self.action_dim == 7 else slice(None)] = self._slots[e].expert_actions(chunk)
        return torch.from_numpy(out)

    def _close(self) -> None:
        sims = [s for s in self._slots if s is not None] + [s for lst in self._spare.values() for s in lst]
        for sim in sims:
            sim.close()
        self._renderer.close()
        self._slots = [None] * self.num_envs
        self._spare = {}
