"""A fast built-in env with real rendered images: move a dot onto a coloured target.

Used by core's tests, the quickstart smoke run and plugin authors. It renders RGB frames with
numpy (no simulator), so a rollout of 16 envs × 40 steps takes well under a second.
"""

from __future__ import annotations

import numpy as np
import torch

from rlinf_core.contracts.env import Env
from rlinf_core.contracts.observation import Observation, StepResult
from rlinf_core.foundation.checks import check_number

COLORS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 230)}


class ReachEnv(Env):
    """Planar reaching: a white dot must reach the target of the instructed colour.

    Three coloured targets are drawn; the instruction names one (the task). The action is a
    2-D velocity in [-1, 1]; success (terminal, reward 1) when the dot is within ``radius`` of
    the named target. States are ``[x, y, tx, ty]`` of the dot and the named target in [0, 1].

    Args:
        image_size: side of the rendered square image, pixels.
        trials_per_task: initial states per task (the trial axis of the eval grid).
        step_size: distance moved per step at action magnitude 1.
        radius: success radius.
        **kwargs: :class:`rlinf_core.Env` arguments (``num_envs``, ``group_size``, ...).
    """

    action_dim = 2

    def __init__(
        self,
        image_size: int = 32,
        trials_per_task: int = 20,
        step_size: float = 0.08,
        radius: float = 0.12,
        **kwargs,
    ) -> None:

        check_number("env.image_size", image_size, low=8, high=4096, hint="pixels per side of the rendered image")
        super().__init__(**kwargs)
        self.image_size = image_size
        self.trials_per_task = trials_per_task
        self.step_size = step_size
        self.radius = radius
        self.num_steps_taken = 0

    @property
    def num_reset_states(self) -> int:
        return len(COLORS) * self.trials_per_task

    def task_ids(self, reset_state_ids):
        return np.asarray(reset_state_ids) // self.trials_per_task

    @property
    def task_names(self) -> list[str]:
        return [f"reach_{c}" for c in COLORS]

    def _build(self) -> None:
        B = self.num_envs
        self.pos = np.zeros((B, 2), np.float32)
        self.targets = np.zeros((B, 3, 2), np.float32)
        self.task = np.zeros(B, np.int64)

    def _reset_envs(self, env_ids: np.ndarray, reset_state_ids: np.ndarray) -> None:
        for e, rid in zip(env_ids, reset_state_ids):
            rng = np.random.default_rng(int(rid) + 7919 * self.seed)
            self.task[e] = int(rid) // self.trials_per_task
            self.targets[e] = rng.uniform(0.15, 0.85, size=(3, 2))
            self.pos[e] = rng.uniform(0.1, 0.9, size=2)

    def _step(self, actions: np.ndarray, live: np.ndarray) -> StepResult:
        self.num_steps_taken += int(live.sum())
        move = np.clip(actions, -1, 1) * self.step_size
        self.pos[live] = np.clip(self.pos[live] + move[live], 0.0, 1.0)
        dist = np.linalg.norm(self.pos - self.targets[np.arange(self.num_envs), self.task], axis=1)
        success = dist < self.radius
        return StepResult(rewards=success.astype(np.float32), terminated=success, success=success)

    def _observe(self, env_ids: np.ndarray) -> Observation:
        S = self.image_size
        imgs = np.zeros((len(env_ids), S, S, 3), np.uint8)
        imgs[...] = 30
        yy, xx = np.mgrid[0:S, 0:S] / (S - 1)
        for i, e in enumerate(env_ids):
            for k, color in enumerate(COLORS.values()):
                tx, ty = self.targets[e, k]
                mask = (np.abs(xx - tx) < 0.07) & (np.abs(yy - ty) < 0.07)
                imgs[i][mask] = color
            px, py = self.pos[e]
            imgs[i][(xx - px) ** 2 + (yy - py) ** 2 < 0.05**2] = 255
        names = list(COLORS)
        states = np.concatenate([self.pos[env_ids], self.targets[env_ids, self.task[env_ids]]], axis=1)
        return Observation(
            main_images=torch.from_numpy(imgs),
            task_descriptions=[f"move to the {names[self.task[e]]} square" for e in env_ids],
            states=torch.from_numpy(states.astype(np.float32)),
        )
