"""A ManiSkill task that edits its camera pixels in ``_get_obs_sensor_data``, as RL4VLA's green screen does:
PickCube where every pixel that is not the robot shows a fixed magenta; the unedited render is kept in
``last_raw_rgb`` / ``last_segmentation`` for the test to compare with."""

from __future__ import annotations

import torch
from mani_skill.envs.tasks.tabletop.pick_cube import PickCubeEnv
from mani_skill.utils.registration import register_env

OVERLAY = torch.tensor([255, 0, 255], dtype=torch.uint8)


@register_env("OverlayPickCube-v1", max_episode_steps=50)
class OverlayPickCube(PickCubeEnv):
    def _get_obs_sensor_data(self, apply_texture_transforms: bool = True) -> dict:
        data = super()._get_obs_sensor_data(apply_texture_transforms)
        if not (self.obs_mode_struct.visual.rgb and self.obs_mode_struct.visual.segmentation):
            return data
        robot = torch.tensor([link._objs[0].entity.per_scene_id for link in self.agent.robot.get_links()])
        for camera in data.values():
            rgb, seg = camera["rgb"], camera["segmentation"][..., 0]
            self.last_raw_rgb, self.last_segmentation = rgb.clone(), seg.clone()
            background = ~torch.isin(seg.cpu(), robot.to(seg.dtype)).to(rgb.device)
            camera["rgb"] = torch.where(background[..., None], OVERLAY.to(rgb.device), rgb)
            self.robot_ids = robot
        return data
