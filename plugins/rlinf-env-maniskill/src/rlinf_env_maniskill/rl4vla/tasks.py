"""The registered PutOnPlateInScene25 tasks: the training task and the OOD variants of RLinf's published table.

Each variant changes one thing relative to ``PutOnPlateInScene25Main-v3`` (RLinf v0.3
``rlinf/envs/maniskill/tasks/variants/*.py``); ``obj_set: test`` selects the out-of-distribution range:

- Vision: ``VisionImage`` (unseen overlay photos 16-20, carrots of training).
- Semantic: ``Carrot`` (unseen carrots 16-24), ``Plate`` (unseen plates 1-16), ``Instruct`` (20 unseen instruction
  templates).
- Position: ``Position`` (object/plate cells on a ring outside the training grid, unseen yaws), ``EEPose``
  (perturbed initial arm joints), ``PositionChangeTo`` (the carrot jumps elsewhere at step 5).
"""

from __future__ import annotations

import numpy as np
import torch
from mani_skill.utils.registration import register_env

from rlinf_env_maniskill.rl4vla import poses
from rlinf_env_maniskill.rl4vla.scene import INITIAL_QPOS, Axis, PutOnPlateInScene25

MAX_STEPS = 80


def _by_set(obj_set: str, train: Axis, test: Axis, all_: Axis) -> Axis:
    return {"train": train, "test": test, "all": all_}[obj_set]


@register_env("PutOnPlateInScene25Main-v3", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25MainV3(PutOnPlateInScene25):
    """Training task: 16 carrots x 16 overlay photos x 784 placements x 4 yaws (``obj_set: train``)."""


@register_env("PutOnPlateInScene25VisionImage-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25VisionImage(PutOnPlateInScene25MainV3):
    """Unseen overlay photos (``test``: 16-20), training carrots (``put_on_plate_25_vision_image.py``)."""

    def episode_axes(self):
        axes = super().episode_axes()
        return {**axes, "carrot": Axis(16, 0)}


@register_env("PutOnPlateInScene25Carrot-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25Carrot(PutOnPlateInScene25MainV3):
    """Unseen carrots (``test``: 16-24) on training overlays (``put_on_plate_25_carrot.py``)."""

    def episode_axes(self):
        return {**super().episode_axes(), "overlay": Axis(16, 0)}


@register_env("PutOnPlateInScene25Plate-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25Plate(PutOnPlateInScene25MainV3):
    """Unseen plates (``test``: 1-16 of the 17-plate database), training carrots and overlays."""

    plates_needed = 17

    def episode_axes(self):
        axes = super().episode_axes()
        plate = _by_set(self.obj_set, Axis(1, 0), Axis(16, 1), Axis(17, 0))
        return {**axes, "carrot": Axis(16, 0), "plate": plate, "overlay": Axis(16, 0)}


INSTRUCTION_TEMPLATES = (
    "put $C$ on $P$",
    "Place the $C$ on the $P$",
    "set $C$ on $P$",
    "move the $C$ to the $P$",
    "Take the $C$ and put it on the $P$",
    "pick up $C$ and set it down on $P$",
    "please put the $C$ on the $P$",
    "Put $C$ onto $P$.",
    "place the $C$ onto the $P$ surface",
    "Make sure $C$ is on $P$.",
    "on the $P$, put the $C$",
    "put the $C$ where the $P$ is",
    "Move the $C$ from the table to the $P$",
    "Move $C$ so it’s on $P$.",
    "Can you put $C$ on $P$?",
    "$C$ on the $P$, please.",
    "the $C$ should be placed on the $P$.",
    "Lay the $C$ down on the $P$.",
    "could you place $C$ over $P$",
    "position the $C$ atop the $P$",
    "Arrange for the $C$ to be resting on $P$.",
)


@register_env("PutOnPlateInScene25Instruct-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25Instruct(PutOnPlateInScene25MainV3):
    """Reworded instructions: template 0 trains, ``test`` uses templates 1-16 (``put_on_plate_25_instruct.py``;
    upstream lists 21 templates and draws from the first 17)."""

    def episode_axes(self):
        axes = super().episode_axes()
        extra = _by_set(self.obj_set, Axis(1, 0), Axis(16, 1), Axis(17, 0))
        return {
            "carrot": Axis(16, 0),
            "extra": extra,
            "plate": axes["plate"],
            "overlay": Axis(16, 0),
            "pos": axes["pos"],
            "quat": axes["quat"],
        }

    def _instruction(self, row: int) -> str:
        carrot = self.model_db_carrot[self.carrot_names[int(self.select_carrot_ids[row])]]["name"]
        plate = self.model_db_plate[self.plate_names[int(self.select_plate_ids[row])]]["name"]
        template = INSTRUCTION_TEMPLATES[int(self.select_extra_ids[row])]
        return template.replace("$C$", carrot).replace("$P$", plate)


@register_env("PutOnPlateInScene25Position-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25Position(PutOnPlateInScene25MainV3):
    """Placements on the ring of cells just outside the training grid and 4 unseen yaws (``test``), objects
    dropped from 0.95 m (``put_on_plate_25_position.py``)."""

    def _generate_init_pose(self):
        inner = poses.pair_configs(poses.grid(poses.INNER_STEPS), 0.95, 0.95)
        ring = poses.pair_configs(poses.grid(poses.OUTER_STEPS, ring_only=True), 0.95, 0.95)
        self.n_train_xyz, self.n_train_quat = len(inner), len(poses.TRAIN_YAWS)
        self.xyz_configs = np.concatenate([inner, ring])
        self.quat_configs = np.concatenate([poses.yaw_configs(poses.TRAIN_YAWS), poses.yaw_configs(poses.OOD_YAWS)])

    def episode_axes(self):
        nx, nq = self.n_train_xyz, self.n_train_quat
        tx, tq = len(self.xyz_configs) - nx, len(self.quat_configs) - nq
        pos = _by_set(self.obj_set, Axis(nx, 0), Axis(tx, nx), Axis(nx + tx, 0))
        quat = _by_set(self.obj_set, Axis(nq, 0), Axis(tq, nq), Axis(nq + tq, 0))
        axes = super().episode_axes()
        return {**axes, "carrot": Axis(16, 0), "overlay": Axis(16, 0), "pos": pos, "quat": quat}


@register_env("PutOnPlateInScene25EEPose-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25EEPose(PutOnPlateInScene25MainV3):
    """The arm starts from perturbed joints (``test``: any of the 14375 non-zero offsets;
    ``put_on_plate_25_ee_pose.py``)."""

    def _generate_init_pose(self):
        super()._generate_init_pose()
        self.robot_qpos = poses.ee_pose_offsets()

    def episode_axes(self):
        axes = super().episode_axes()
        m = len(self.robot_qpos)
        extra = _by_set(self.obj_set, Axis(1, 0), Axis(m - 1, 1), Axis(m, 0))
        return {
            "carrot": Axis(16, 0),
            "extra": extra,
            "plate": axes["plate"],
            "overlay": Axis(16, 0),
            "pos": axes["pos"],
            "quat": axes["quat"],
        }

    def _robot_init_qpos(self, env_idx):
        offsets = torch.tensor(self.robot_qpos, device=self.device)  # float64 sums, as upstream
        base = torch.tensor(INITIAL_QPOS, device=self.device)
        return offsets[self.select_extra_ids[env_idx]] + base


@register_env("PutOnPlateInScene25PositionChangeTo-v1", max_episode_steps=MAX_STEPS)
class PutOnPlateInScene25PositionChange(PutOnPlateInScene25MainV3):
    """With ``obj_set`` test/all the carrot is moved to a third cell (at least 15 cm away) at step 5
    (``put_on_plate_25_position_change.py``); carrot 0.95 m, plate 0.92 m."""

    change_position_timestep = 5

    def _generate_init_pose(self):
        self.xyz_configs = poses.change_to_configs()
        self.quat_configs = poses.yaw_configs(poses.TRAIN_YAWS)

    @property
    def can_change_position(self) -> bool:
        return self.obj_set != "train"

    def episode_axes(self):
        return {**super().episode_axes(), "carrot": Axis(16, 0), "overlay": Axis(16, 0)}

    def evaluate(self):
        if self.can_change_position and int(self.elapsed_steps[0]) == self.change_position_timestep:
            xyz = torch.tensor(self.xyz_configs, dtype=torch.float32, device=self.device)
            quat = torch.tensor(self.quat_configs, dtype=torch.float32, device=self.device)
            everyone = torch.arange(self.num_envs, device=self.device)
            self._place(
                self.objs_carrot,
                self.select_carrot_ids,
                xyz[self.select_pos_ids, 2],
                quat[self.select_quat_ids, 0],
                1.0,
                everyone,
            )
        return super().evaluate()


__all__ = [
    "PutOnPlateInScene25MainV3",
    "PutOnPlateInScene25VisionImage",
    "PutOnPlateInScene25Carrot",
    "PutOnPlateInScene25Plate",
    "PutOnPlateInScene25Instruct",
    "PutOnPlateInScene25Position",
    "PutOnPlateInScene25EEPose",
    "PutOnPlateInScene25PositionChange",
]
