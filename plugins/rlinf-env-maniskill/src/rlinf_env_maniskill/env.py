"""ManiSkill3 as an :class:`rlinf_core.Env`: tabletop tasks, RGB camera, 7-D end-effector delta actions."""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from rlinf_core import check_choice
from rlinf_core.contracts import Env, Observation, StepResult
from rlinf_env_maniskill import lavapipe
from rlinf_env_maniskill.settings import FLAT_KEYS, ManiSkillRenderConfig, ManiSkillRewardConfig, ManiSkillSimConfig
from rlinf_env_maniskill.tasks import OFFLINE_TASKS, default_max_episode_steps


def _default_cache_dir() -> Path:
    env = os.environ.get("RLINF_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlinf"


class ManiSkillEnv(Env):
    """ManiSkill3 tasks with the Panda arm, on the CPU (lavapipe) or GPU simulation backend.

    A reset state id is ``task_id * trials_per_task + trial``; trial ``t`` starts ManiSkill's
    episode with seed ``episode_seed_offset + t`` (or, with ``reset_with: episode_id``, with
    ``options={"episode_id": t}`` and the constant seed ``episode_seed_offset``), so an id always gives
    the same initial state, on any sub-env (GRPO groups start identically). Actions are ManiSkill's ``pd_ee_delta_pose``
    (xyz and roll/pitch/yaw deltas of the end effector, then the gripper). Success ends an episode
    (unless ``ignore_terminations``), and so does ManiSkill's ``fail`` flag; episode records carry
    ``fail_once``, logged as ``env/fail_once`` and ``eval/fail_once``.

    On the CPU backend every sub-env is its own ManiSkill env (ManiSkill's CPU physics holds one
    env); use ``rollout.env_workers`` to spread them over processes. On the GPU backend each task is one
    batched ManiSkill env of ``num_envs`` sub-envs. Without a GPU, SAPIEN needs Mesa >= 24.3
    lavapipe: run ``scripts/install_lavapipe.sh`` once (or ``python -m rlinf_env_maniskill.lavapipe
    install``); it is found automatically.

    Args:
        tasks: ManiSkill env ids (task id = position in this list); ``Group/<env id>`` puts the task in an
            eval-table group (RLinf's published OOD columns: ``Vision/...``, ``Semantic/...``, ``Position/...``).
            Offline ones:
            PickCube-v1, PushCube-v1, PullCube-v1, StackCube-v1, StackPyramid-v1,
            PegInsertionSide-v1, PokeCube-v1, LiftPegUpright-v1, PlaceSphere-v1, PlugCharger-v1,
            RollBall-v1, PullCubeTool-v1. Tasks whose assets are missing fail with the download
            command.
        trials_per_task: initial states per task (the trial axis of the eval grid).
        episode_seed_offset: ManiSkill seed of trial 0 (use a different range for held-out eval).
        reset_with: how a trial picks its initial state. ``seed``: ManiSkill's episode seed
            ``episode_seed_offset + trial`` (the task samples its scene from it). ``episode_id``: as RLinf
            resets RL4VLA's PutOnPlateInScene25 tasks, ``options={"episode_id": trial}`` with the constant
            seed ``episode_seed_offset``; the task decodes the id into a scene of its ``obj_set``, and
            ``trials_per_task`` may be at most the task's ``total_num_trials`` (802816 for ``obj_set:
            train``: 16 carrots x 16 table overlays x 784 placements x 4 rotations, one plate). Reset by
            ``seed``, those tasks draw the id from the torch RNG ManiSkill seeds with the episode seed: each
            trial is then a fixed pseudo-random scene, and the run only ever sees ``trials_per_task`` of them.
        action_format: ``normalized`` (ManiSkill's [-1, 1] scale: ±1 = ±10 cm / ±0.1 rad, gripper
            -1 closed … 1 open) or ``bridge`` (metres and radians, gripper 0 closed … 1 open, as
            OpenVLA un-normalizes Bridge actions; the gripper is binarized as RLinf does: open above 0.5).
        include_state: add ``states`` = joint positions + TCP pose (16-D for the Panda).
        instructions: natural-language instruction per task id, overriding the built-in ones
            (needed for tasks outside the list above).
        render: what the camera renders (:class:`~rlinf_env_maniskill.settings.ManiSkillRenderConfig`:
            ``image_size``, ``camera``, ``show_goal``, ``shader_pack``, ``obs_mode``).
        reward: how a step is rewarded (:class:`~rlinf_env_maniskill.settings.ManiSkillRewardConfig`: ``mode``,
            ``relative``).
        sim: the simulator (:class:`~rlinf_env_maniskill.settings.ManiSkillSimConfig`: ``backend``,
            ``control_mode``, ``config``, ``make_kwargs``, ``task_modules``, ``cache_dir``).
        max_episode_steps: truncation limit; default the tasks' own (PickCube 50, PutOnPlate 80).
        **kwargs: :class:`rlinf_core.Env` arguments (``num_envs``, ``group_size``, ``auto_reset``, ...).
    """

    episode_metrics = ("fail_once",)
    FLAT_SETTINGS = FLAT_KEYS

    action_dim = 7

    def __init__(
        self,
        tasks: list[str] | None = None,
        trials_per_task: int = 100,
        episode_seed_offset: int = 0,
        reset_with: Literal["seed", "episode_id"] = "seed",
        action_format: Literal["normalized", "bridge"] = "normalized",
        include_state: bool = False,
        instructions: dict[str, str] | None = None,
        render: ManiSkillRenderConfig = ManiSkillRenderConfig(),
        reward: ManiSkillRewardConfig = ManiSkillRewardConfig(),
        sim: ManiSkillSimConfig = ManiSkillSimConfig(),
        max_episode_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        names = list(tasks) if tasks else ["PickCube-v1"]
        tasks = [name.rsplit("/", 1)[-1] for name in names]  # "Vision/<env id>": the id in its eval-table group
        super().__init__(max_episode_steps=max_episode_steps or default_max_episode_steps(tasks), **kwargs)
        if trials_per_task < 1:
            raise ValueError(f"trials_per_task must be >= 1, got {trials_per_task}")
        check_choice("action_format", action_format, ("normalized", "bridge"))
        check_choice("reset_with", reset_with, ("seed", "episode_id"))
        self.instructions = {t: OFFLINE_TASKS[t].instruction for t in tasks if t in OFFLINE_TASKS}
        self.instructions.update(instructions or {})
        self.tasks = tasks
        self._task_names = names
        self.trials_per_task = trials_per_task
        self.episode_seed_offset = episode_seed_offset
        self.reset_with = reset_with
        self.action_format = action_format
        self.include_state = include_state
        self.render = render
        self.reward = reward
        self.sim = sim
        self.image_size = render.height_width
        self._sims: dict[Any, Any] = {}
        self._slot_task = np.zeros(self.num_envs, np.int64)
        self._started = np.zeros(self.num_envs, bool)  # simulators are made at a slot's first reset
        self._prev_reward = np.zeros(self.num_envs, np.float32)

    # ------------------------------------------------------------------ reset-state index
    @property
    def num_reset_states(self) -> int:
        return len(self.tasks) * self.trials_per_task

    def task_ids(self, reset_state_ids: np.ndarray) -> np.ndarray:
        return np.asarray(reset_state_ids) // self.trials_per_task

    @property
    def task_names(self) -> list[str]:
        return list(self._task_names)

    # ------------------------------------------------------------------ simulator
    @property
    def uses_gpu(self) -> bool:
        if self.sim.backend == "auto":
            return torch.cuda.is_available()
        return self.sim.backend == "gpu"

    def _prepare_process(self) -> None:
        """Vulkan driver, asset and shader-cache locations: before SAPIEN/ManiSkill are imported."""
        lavapipe.configure()
        cache = Path(self.sim.cache_dir).expanduser() if self.sim.cache_dir else _default_cache_dir()
        asset_root = str(cache / "maniskill")
        os.environ["MS_SKIP_ASSET_DOWNLOAD_PROMPT"] = "1"
        if self.sim.cache_dir or "MS_ASSET_DIR" not in os.environ:
            loaded = sys.modules.get("mani_skill")
            if loaded is not None and str(loaded.ASSET_DIR.parent) != asset_root:
                warnings.warn(
                    f"ManiSkill was already imported with MS_ASSET_DIR={loaded.ASSET_DIR.parent}; "
                    f"cache_dir {asset_root} applies only to new processes",
                    stacklevel=3,
                )
            os.environ["MS_ASSET_DIR"] = asset_root
        os.environ.setdefault("MESA_SHADER_CACHE_DIR", str(cache / "mesa_shader_cache"))

    def _build(self) -> None:
        self._prepare_process()
        try:
            from rlinf_env_maniskill import _sim
        except ImportError as exc:
            raise ImportError(
                f"ManiSkillEnv needs ManiSkill 3 ({exc}): pip install rlinf-env-maniskill "
                "(mani-skill==3.0.1, sapien==3.0.3)"
            ) from exc
        lavapipe.check_render_device()
        for module in self.sim.task_modules or ():
            importlib.import_module(module)
        if any(t.startswith("PutOnPlateInScene25") for t in self.tasks):
            importlib.import_module("rlinf_env_maniskill.rl4vla")  # our RL4VLA task family
        for task in self.tasks:
            _sim.ensure_task_available(task)
        missing = [t for t in self.tasks if t not in self.instructions and not _sim.has_language(t)]
        if missing:
            raise ValueError(
                f"no instruction for ManiSkill task(s) {missing}: pass instructions={{task: text}} "
                f"(built-in for {', '.join(OFFLINE_TASKS)})"
            )
        self._simmod = _sim

    def _sim_of(self, slot: int, task_id: int):
        """The simulator (and its row) that runs ``slot`` while it plays task ``task_id``."""
        key = task_id if self.uses_gpu else (slot, task_id)
        sim = self._sims.get(key)
        if sim is None:
            sim = self._simmod.SimBatch(
                self.tasks[task_id],
                n=self.num_envs if self.uses_gpu else 1,
                gpu=self.uses_gpu,
                image_size=self.image_size,
                camera=self.render.camera,
                show_goal=self.render.show_goal,
                reward_mode={"dense": "normalized_dense"}.get(self.reward.mode, self.reward.mode),
                sim_config=self.sim.config,
                make_kwargs=self.sim.make_kwargs,
                control_mode=self.sim.control_mode,
                render_gpu=torch.cuda.is_available(),
                shader_pack=self.render.shader_pack,
                obs_mode=self.render.obs_mode,
            )
            self._check_episode_ids(sim)
            self._sims[key] = sim
        return sim, (slot if self.uses_gpu else 0)

    def _check_episode_ids(self, sim) -> None:
        if self.reset_with != "episode_id":
            return
        total = sim.total_num_trials
        if total is None:
            sim.close()
            raise ValueError(
                f"reset_with: episode_id needs a task that decodes episode ids (total_num_trials, as RL4VLA's "
                f"PutOnPlateInScene25 tasks); {sim.task!r} has none: use reset_with: seed"
            )
        if self.trials_per_task > total:
            sim.close()
            raise ValueError(
                f"trials_per_task ({self.trials_per_task}) exceeds the {total} episode ids of {sim.task!r} "
                f"(its total_num_trials for these make_kwargs): set trials_per_task <= {total}"
            )

    def _groups(self, slots: np.ndarray) -> dict[int, tuple[Any, list[int], list[int]]]:
        """``slots`` grouped by simulator: ``id(sim) -> (sim, slots, rows)``."""
        out: dict[int, tuple[Any, list[int], list[int]]] = {}
        for slot in slots:
            sim, row = self._sim_of(int(slot), int(self._slot_task[slot]))
            entry = out.setdefault(id(sim), (sim, [], []))
            entry[1].append(int(slot))
            entry[2].append(row)
        return out

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        task_ids = self.task_ids(reset_state_ids)
        trials = np.asarray(reset_state_ids) % self.trials_per_task
        by_id = self.reset_with == "episode_id"
        seeds = np.full_like(trials, self.episode_seed_offset) if by_id else self.episode_seed_offset + trials
        for slot, task_id, seed, trial in zip(env_ids, task_ids, seeds, trials):
            self._slot_task[slot] = task_id
            self._started[slot] = True
            sim, row = self._sim_of(int(slot), int(task_id))
            sim.reset_rows([row], [int(seed)], [int(trial)] if by_id else None)
            self._prev_reward[slot] = 0.0

    def _step(self, actions: np.ndarray, live: np.ndarray) -> StepResult:
        B = self.num_envs
        rewards = np.zeros(B, np.float32)
        success = np.zeros(B, bool)
        fail = np.zeros(B, bool)
        for sim, slots, rows in self._groups(np.nonzero(live)[0]).values():
            batch = np.zeros((sim.n, 7), np.float32)
            batch[rows] = sim.to_sim_actions(actions[slots], self.action_format)
            mask = np.zeros(sim.n, bool)
            mask[rows] = True
            r, s, f = sim.step(batch, mask)
            rewards[slots], success[slots], fail[slots] = r[rows], s[rows], f[rows]
        for slot in np.nonzero(live)[0]:
            self.episode_info(int(slot), reduce="max", fail_once=float(fail[slot]))
        if self.reward.relative:
            raw = rewards.copy()
            rewards = np.where(live, raw - self._prev_reward, 0.0).astype(np.float32)
            self._prev_reward = np.where(live, raw, self._prev_reward).astype(np.float32)
        return StepResult(rewards=rewards, terminated=success | fail, success=success)

    def _observe(self, env_ids: np.ndarray) -> Observation:
        H, W = self.image_size
        env_ids = np.asarray(env_ids)
        images = np.zeros((len(env_ids), H, W, 3), np.uint8)
        states: np.ndarray | None = None
        # a slot never reset (idle in an eval pass) shows a black frame instead of building a simulator
        texts = [self.instructions.get(self.tasks[0], "")] * len(env_ids)
        position = {int(slot): i for i, slot in enumerate(env_ids)}
        for sim, slots, rows in self._groups(env_ids[self._started[env_ids]]).values():
            where = [position[s] for s in slots]
            images[where] = sim.render(rows)
            task = sim.task
            own = sim.language(rows) if task not in self.instructions else [self.instructions[task]] * len(rows)
            for i, text in zip(where, own):
                texts[i] = text
            if self.include_state:
                proprio = sim.proprio(rows)
                if states is None:
                    states = np.zeros((len(env_ids), proprio.shape[1]), np.float32)
                states[where] = proprio
        if self.include_state and states is None:
            states = np.zeros((len(env_ids), 0), np.float32)
        return Observation(
            main_images=torch.from_numpy(images),
            task_descriptions=texts,
            states=torch.from_numpy(states) if states is not None else None,
        )

    def _close(self) -> None:
        for sim in self._sims.values():
            sim.close()
        self._sims = {}
        self._started[:] = False
