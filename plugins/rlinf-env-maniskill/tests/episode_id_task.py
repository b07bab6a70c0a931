"""A ManiSkill task that picks its scene by episode id, as RL4VLA's PutOnPlateInScene25 tasks do (those need the
Bridge assets, which tests cannot download): PickCube with the cube placed by ``options["episode_id"]`` on a 4 x 4
grid, and, without an id, at a grid cell drawn from the global torch RNG (not from the episode seed)."""

from __future__ import annotations

import torch
from mani_skill.envs.tasks.tabletop.pick_cube import PickCubeEnv
from mani_skill.utils.registration import register_env
from mani_skill.utils.structs.pose import Pose

GRID = 4


def cube_xy(episode_id: torch.Tensor) -> torch.Tensor:
    """``[n]`` episode ids → ``[n, 2]`` cube positions (metres)."""
    ids = episode_id.long()
    return torch.stack([(ids // GRID) * 0.04 - 0.06, (ids % GRID) * 0.04 - 0.06], dim=-1).float()


@register_env("EpisodeIdPickCube-v1", max_episode_steps=50)
class EpisodeIdPickCube(PickCubeEnv):
    total_num_trials = GRID * GRID

    def _initialize_episode(self, env_idx: torch.Tensor, options: dict) -> None:
        super()._initialize_episode(env_idx, options)
        with torch.device(self.device):
            ids = options.get("episode_id", torch.randint(0, self.total_num_trials, (len(env_idx),)))
            self.episode_id = ids.to(self.device)
            xyz = self.cube.pose.p[env_idx].clone()
            xyz[:, :2] = cube_xy(self.episode_id)
            self.cube.set_pose(Pose.create_from_pq(xyz, self.cube.pose.q[env_idx]))
