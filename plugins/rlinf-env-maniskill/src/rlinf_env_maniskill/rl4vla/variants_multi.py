"""The Semantic column's distractor variants (RLinf v0.3 ``tasks/variants/put_on_plate_25_multi_carrot.py`` and
``put_on_plate_25_multi_plate.py``): a second carrot or a second plate on the table.

Placements come from triples of grid cells (object, plate, distractor); the distractor takes the yaw of the model
it duplicates. The distractor's id is derived from the episode id as upstream does (below).
"""

from __future__ import annotations

import numpy as np
from mani_skill.utils.registration import register_env

from rlinf_env_maniskill.rl4vla import poses
from rlinf_env_maniskill.rl4vla.scene import Axis
from rlinf_env_maniskill.rl4vla.tasks import MAX_STEPS, PutOnPlateInScene25MainV3, _by_set


def _triples(dists: tuple[float, float, float], heights: tuple[float, float, float]) -> np.ndarray:
    """``[N, 3, 3]`` over the 6 x 6 grid with min distances (object-plate, distractor-plate, object-distractor)."""
    cells = poses.grid(poses.INNER_STEPS)
    out = [
        [np.append(a, heights[0]), np.append(b, heights[1]), np.append(c, heights[2])]
        for a in cells
        for b in cells
        for c in cells
        if np.linalg.norm(a - b) > dists[0] and np.linalg.norm(c - b) > dists[1] and np.linalg.norm(a - c) > dists[2]
    ]
    return np.asarray(out)


@register_env("PutOnPlateInScene25MultiCarrot-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25MultiCarrot(PutOnPlateInScene25MainV3):
    """A second carrot of the same set lies on the table (``test``: both from the 9 unseen carrots)."""

    def _generate_init_pose(self):
        self.xyz_configs = _triples((0.070, 0.070, 0.15), (0.95, 0.92, 1.0))
        self.quat_configs = poses.yaw_configs(poses.TRAIN_YAWS)

    def episode_axes(self):
        axes = super().episode_axes()
        carrot = axes["carrot"]
        return {
            "carrot": carrot,
            "extra": Axis(carrot.count - 1, 0),
            "plate": axes["plate"],
            "overlay": Axis(16, 0),
            "pos": axes["pos"],
            "quat": axes["quat"],
        }

    def _post_decode(self, picks):
        carrot = self.episode_axes()["carrot"]
        # upstream adds to the already offset carrot id: (carrot + e + 1) % count + offset
        picks["extra"] = (picks["carrot"] + picks["extra"] + 1) % carrot.count + carrot.offset
        return picks

    def _extras(self, xyz, quat, env_idx):
        pos, rot = self.select_pos_ids[env_idx], self.select_quat_ids[env_idx]
        return {"carrot": (self.select_extra_ids, xyz[pos, 2], quat[rot, 0]), "plate": None}


@register_env("PutOnPlateInScene25MultiPlate-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25MultiPlate(PutOnPlateInScene25MainV3):
    """A second plate lies on the table (``test``: both from the 16 unseen plates); any of the 21 overlays."""

    plates_needed = 17

    def _generate_init_pose(self):
        self.xyz_configs = _triples((0.070, 0.150, 0.070), (1.0, 0.92, 0.96))
        self.quat_configs = poses.yaw_configs(poses.TRAIN_YAWS)

    def episode_axes(self):
        axes = super().episode_axes()
        plates = _by_set(self.obj_set, Axis(1, 0), Axis(16, 0), Axis(17, 0))  # offset added in _post_decode
        extra = {"train": 16, "test": 15, "all": 16}[self.obj_set]
        return {
            "carrot": Axis(16, 0),
            "plate": plates,
            "extra": Axis(extra, 0),
            "overlay": Axis(len(self.overlay_images_numpy), 0),
            "pos": axes["pos"],
            "quat": axes["quat"],
        }

    def _post_decode(self, picks):
        modulus = {"train": 17, "test": 16, "all": 17}[self.obj_set]
        offset = 1 if self.obj_set == "test" else 0
        picks["extra"] = (picks["plate"] + picks["extra"] + 1) % modulus + offset
        picks["plate"] = picks["plate"] + offset
        return picks

    def _extras(self, xyz, quat, env_idx):
        pos, rot = self.select_pos_ids[env_idx], self.select_quat_ids[env_idx]
        return {"carrot": None, "plate": (self.select_extra_ids, xyz[pos, 2], quat[rot, 1])}
