"""The PutOnPlateInScene25 scene (RL4VLA, as RLinf v0.3 ships it): a WidowX on the Bridge table, one of 25 carrots
and a plate placed from pose tables, the real Bridge photo pasted behind robot and objects (the green screen).

Behaviour follows RLinf v0.3 ``rlinf/envs/maniskill/tasks/put_on_in_scene_multi.py`` (cited by line below); the
code is ours. Assets: :mod:`rlinf_env_maniskill.assets`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import sapien
import torch
from mani_skill.envs.sapien_env import BaseEnv
from mani_skill.envs.tasks.digital_twins.bridge_dataset_eval.base_env import WidowX250SBridgeDatasetFlatTable
from mani_skill.sensors.camera import CameraConfig
from mani_skill.utils import sapien_utils
from mani_skill.utils.geometry import rotation_conversions
from mani_skill.utils.structs.pose import Pose
from mani_skill.utils.structs.types import SimConfig
from sapien.physx import PhysxMaterial

from rlinf_env_maniskill import assets
from rlinf_env_maniskill.rl4vla import poses

#: WidowX initial joints and base poses measured for the Bridge dataset (upstream :84-99).
INITIAL_QPOS = np.array([-0.01840777, 0.0398835, 0.22242722, -0.00460194, 1.36524296, 0.00153398, 0.037, 0.037])
ROBOT_POSE = sapien.Pose([0.147, 0.028, 0.870], q=[0, 0, 0, 1])
SAFE_ROBOT_POSE = sapien.Pose([0.147, 0.028, 1.870], q=[0, 0, 0, 1])
OVERLAY_HW = (480, 640)
#: Success thresholds of ``evaluate`` (upstream :581-583).
XY_SLACK, Z_SLACK, MIN_CONTACT_FORCE = 0.01, 0.05, 0.03
CORNERS = torch.tensor([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=torch.float32)


@dataclass(frozen=True)
class Axis:
    """One digit of the episode id: ``count`` choices starting at ``offset`` of its table."""

    count: int
    offset: int = 0


def _parking(kind: float, idx: int, n: int, device) -> torch.Tensor:
    """Off-table pose of an unused model (upstream: ``[1, 0.3·i, 1]`` carrots, ``[2, 0.3·i, 1]`` plates)."""
    return torch.tensor([kind, 0.3 * idx, 1.0], device=device).reshape(1, 3).repeat(n, 1)


def _read_rgb(path: Path, hw: tuple[int, int] = OVERLAY_HW) -> np.ndarray:
    image = cv2.imread(str(path))
    if image is None:
        raise assets.AssetError(f"PutOnPlateInScene25 asset unreadable as an image: {path}")
    return cv2.resize(cv2.cvtColor(image, cv2.COLOR_BGR2RGB), (hw[1], hw[0]))


class PutOnPlateInScene25(BaseEnv):
    """Put the selected carrot on the plate. ``episode_id`` (reset option) picks carrot, plate, overlay photo,
    positions and yaw as a mixed-radix number (:meth:`episode_axes`); success = the carrot rests on the plate.

    Args:
        obj_set: ``train``, ``test`` (held-out carrots/overlays, or the variant's OOD range) or ``all``.
        asset_dir: RL4VLA/RLinf model databases (default ``$MANISKILL_ASSET_DIR``).
        bridge_dir: ManiSkill's data folder with ``bridge_v2_real2sim`` and ``widowx250s`` (default
            ManiSkill's ``ASSET_DIR``).
        use_multiple_plates: keep every plate of the database (default: only the first, as the main task).
        **kwargs: ManiSkill ``BaseEnv`` arguments.
    """

    SUPPORTED_OBS_MODES = ("rgb+segmentation",)
    SUPPORTED_REWARD_MODES = ("none", "sparse")
    rgb_camera_name = "3rd_view_camera"
    obj_static_friction = obj_dynamic_friction = 1.0
    #: Plates the task needs in the database (the Plate variants need all 17).
    plates_needed = 1
    obj_z, plate_z = 0.90, 0.90  # PutOnPlateInScene25MainV3._generate_init_pose (upstream :947)
    texture_hw = OVERLAY_HW  # the VisionWhole variants read the textures at twice the size

    def __init__(
        self,
        obj_set: str = "train",
        asset_dir: str | None = None,
        bridge_dir: str | None = None,
        use_multiple_plates: bool = False,
        **kwargs,
    ) -> None:
        if obj_set not in ("train", "test", "all"):
            raise ValueError(f"obj_set must be one of ['train', 'test', 'all'], got {obj_set!r}")
        self.obj_set = obj_set
        self.use_multiple_plates = use_multiple_plates
        self.paths = assets.resolve(asset_dir, bridge_dir)
        assets.require(self.paths, plates=self.plates_needed)
        self._load_databases()
        self._generate_init_pose()
        self.extra_stats: dict = {}
        agent = type("RL4VLAWidowX", (WidowX250SBridgeDatasetFlatTable,), {"urdf_path": str(self.paths.robot_urdf)})
        super().__init__(robot_uids=agent, **kwargs)

    # ------------------------------------------------------------------ databases and pose tables
    def _load_databases(self) -> None:
        root = self.paths.carrot_dir
        self.model_db_carrot = self._select_carrots(json.loads((root / "more_carrot" / "model_db.json").read_text()))
        plates = json.loads((root / "more_plate" / "model_db.json").read_text())
        if not (self.use_multiple_plates or self.plates_needed > 1):
            plates = dict(list(plates.items())[:1])
        self.model_db_plate = plates
        self.carrot_names, self.plate_names = list(self.model_db_carrot), list(self.model_db_plate)
        tables = json.loads((root / "more_table" / "model_db.json").read_text())
        self.overlay_images_numpy = [_read_rgb(root / "more_table" / "imgs" / k) for k in tables]
        textures = root / "more_table" / "textures"
        self.overlay_textures_numpy = [_read_rgb(textures / v["texture"], self.texture_hw) for v in tables.values()]
        self.overlay_mix_numpy = [float(v["mix"]) for v in tables.values()]

    def _select_carrots(self, db: dict) -> dict:
        return db

    def _generate_init_pose(self) -> None:
        self.xyz_configs = poses.pair_configs(poses.grid(poses.INNER_STEPS), self.obj_z, self.plate_z)
        self.quat_configs = poses.yaw_configs(poses.TRAIN_YAWS)

    # ------------------------------------------------------------------ episode id -> scene
    def episode_axes(self) -> dict[str, Axis]:
        """Digits of the episode id, most significant first (upstream ``basic_obj_infos``, :900-925)."""
        carrot = {"train": Axis(16, 0), "test": Axis(9, 16), "all": Axis(25, 0)}[self.obj_set]
        overlay = {"train": Axis(16, 0), "test": Axis(5, 16), "all": Axis(21, 0)}[self.obj_set]
        return {
            "carrot": carrot,
            "plate": Axis(len(self.plate_names)),
            "overlay": overlay,
            "pos": Axis(len(self.xyz_configs)),
            "quat": Axis(len(self.quat_configs)),
        }

    @property
    def total_num_trials(self) -> int:
        return int(np.prod([a.count for a in self.episode_axes().values()]))

    def decode_episode_id(self, episode_id: torch.Tensor) -> dict[str, torch.Tensor]:
        out, stride = {}, 1
        for name, axis in reversed(list(self.episode_axes().items())):
            out[name] = (episode_id // stride) % axis.count + axis.offset
            stride *= axis.count
        return out

    def _post_decode(self, picks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Variants that derive a pick from other digits (the second carrot / plate) override this."""
        return picks

    def _reset_episode_idx(self, env_idx: torch.Tensor, options: dict) -> None:
        """``options["episode_id"]`` (or ids drawn from the torch RNG) for the reset rows (upstream :927-975)."""
        n = len(env_idx)
        ids = options.get("episode_id")
        if ids is None:
            ids = torch.randint(0, self.total_num_trials, (n,), device=self.device)
        ids = torch.as_tensor(ids, device=self.device).reshape(-1) % self.total_num_trials
        if not hasattr(self, "episode_id") or n == self.num_envs:
            self.episode_id = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.episode_id[torch.as_tensor(env_idx, device=self.device).long()] = ids.long()
        self.task_reset_states = {"episode_id": self.episode_id}
        picks = self._post_decode(self.decode_episode_id(self.episode_id))
        self.select_carrot_ids, self.select_plate_ids = picks["carrot"], picks["plate"]
        self.select_overlay_ids = picks["overlay"]
        self.select_pos_ids, self.select_quat_ids = picks["pos"], picks["quat"]
        self.select_extra_ids = picks.get("extra")

    # ------------------------------------------------------------------ scene
    @property
    def _default_sim_config(self):
        return SimConfig(sim_freq=500, control_freq=5, spacing=20)

    def _load_agent(self, options: dict):
        super()._load_agent(options, sapien.Pose(p=[0.127, 0.060, 0.85], q=[0, 0, 0, 1]))

    def _build_model(self, name: str, folder: Path, info: dict, parked: torch.Tensor):
        """An actor from ``folder/collision.obj`` + ``textured.*`` at a scale drawn from the entry (upstream :196)."""
        scale = float(self.np_random.choice(info.get("scale", [1.0])))
        material = PhysxMaterial(
            static_friction=self.obj_static_friction, dynamic_friction=self.obj_dynamic_friction, restitution=0.0
        )
        builder = self.scene.create_actor_builder()
        builder.add_multiple_convex_collisions_from_file(
            filename=str(folder / "collision.obj"),
            scale=[scale] * 3,
            material=material,
            density=info.get("density", 1000),
        )
        visual = next(folder / f"textured.{e}" for e in ("obj", "dae", "glb") if (folder / f"textured.{e}").exists())
        builder.add_visual_from_file(filename=str(visual), scale=[scale] * 3)
        builder.initial_pose = Pose.create_from_pq(parked)
        bbox = np.asarray(info["bbox"]["max"]) - np.asarray(info["bbox"]["min"])
        self.model_bbox_sizes[name] = torch.as_tensor(bbox * scale, dtype=torch.float32, device=self.device)
        return builder.build(name=name)

    def _load_scene(self, options: dict):
        for i in range(self.num_envs):  # SIMPLER's robot look (upstream :222)
            sapien_utils.set_articulation_render_material(self.agent.robot._objs[i], specular=0.9, roughness=0.3)
        builder = self.scene.create_actor_builder()
        stage_pose = sapien.Pose(q=[0.707, 0.707, 0, 0])
        builder.add_nonconvex_collision_from_file(str(self.paths.stage), pose=stage_pose)
        builder.add_visual_from_file(str(self.paths.stage), pose=stage_pose)
        builder.initial_pose = sapien.Pose(-np.array([-2.0634, -2.8313, 0.0]))
        builder.build_static(name="arena")
        self.model_bbox_sizes: dict[str, torch.Tensor] = {}
        root = self.paths.carrot_dir
        self.objs_carrot = {
            n: self._build_model(
                n, root / "more_carrot" / n, self.model_db_carrot[n], torch.tensor([1.0, 0.3 * i, 1.0])
            )
            for i, n in enumerate(self.model_db_carrot)
        }
        self.objs_plate = {
            n: self._build_model(n, root / "more_plate" / n, self.model_db_plate[n], torch.tensor([2.0, 0.3 * i, 1.0]))
            for i, n in enumerate(self.model_db_plate)
        }

    def _load_lighting(self, options: dict):
        """Upstream :292: ambient 0.3, a shadowless key light from above and two fill lights."""
        self.scene.set_ambient_light([0.3, 0.3, 0.3])
        self.scene.add_directional_light(
            [0, 0, -1], [2.2, 2.2, 2.2], shadow=False, shadow_scale=5, shadow_map_size=2048
        )
        self.scene.add_directional_light([-1, -0.5, -1], [0.7, 0.7, 0.7])
        self.scene.add_directional_light([1, 1, -1], [0.7, 0.7, 0.7])

    def _after_reconfigure(self, options: dict):
        """Segmentation ids kept in front of the overlay: every object actor and the robot links (upstream :710)."""
        ids = [
            a._objs[0].per_scene_id
            for a in self.scene.actors.values()
            if a.name not in ("ground", "goal_site", "", "arena")
        ]
        self.target_object_actor_ids = torch.tensor(ids, dtype=torch.int16, device=self.device)
        links = [x._objs[0].entity.per_scene_id for x in self.agent.robot.get_links()]
        self.robot_link_ids = torch.tensor(links, dtype=torch.int16, device=self.device)

    @property
    def _default_human_render_camera_configs(self):
        pose = sapien.Pose([0.00, -0.16, 0.336], [0.909182, -0.0819809, 0.347277, 0.214629])
        intrinsic = np.array([[623.588, 0, 319.501], [0, 623.588, 239.545], [0, 0, 1]])
        return CameraConfig(
            "render_camera",
            pose=pose,
            width=512,
            height=512,
            intrinsic=intrinsic,
            near=0.01,
            far=100,
            mount=self.agent.robot.links_map["base_link"],
        )

    # ------------------------------------------------------------------ episodes
    def _place(
        self,
        actors: dict,
        picks: torch.Tensor,
        p_sel: torch.Tensor,
        q_sel: torch.Tensor,
        kind: float,
        env_idx,
        extra: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ):
        """Chosen model at ``p_sel``/``q_sel``, the optional second one (``extra``: picks, p, q) at its own place,
        every other model parked off the table."""
        b = len(env_idx)
        for idx, name in enumerate(actors):
            chosen = (picks[env_idx] == idx).unsqueeze(1)
            p = torch.where(chosen, p_sel, _parking(kind, idx, b, self.device))
            q = torch.where(chosen, q_sel, torch.tensor([0.0, 0, 0, 1], device=self.device).repeat(b, 1))
            if extra is not None:
                second = (extra[0][env_idx] == idx).unsqueeze(1)
                p, q = torch.where(second, extra[1], p), torch.where(second, extra[2], q)
            actors[name].set_pose(Pose.create_from_pq(p=p, q=q))

    def _extras(self, xyz: torch.Tensor, quat: torch.Tensor, env_idx) -> dict[str, tuple | None]:
        """Second carrot / plate of the Multi variants: ``{"carrot": (picks, p, q) | None, "plate": ...}``."""
        return {"carrot": None, "plate": None}

    def _robot_init_qpos(self, env_idx: torch.Tensor):
        return INITIAL_QPOS

    def _initialize_episode(self, env_idx: torch.Tensor, options: dict):
        """Upstream :440-543: decode the id, overlay, park unused models, place the chosen pair, reset the robot.
        (Upstream v0.3 computes the settle condition but calls no ``_settle``; nor do we.)"""
        self._reset_episode_idx(env_idx, options)
        sensor = self._sensor_configs[self.rgb_camera_name]
        if (sensor.height, sensor.width) != OVERLAY_HW:
            size = f"{sensor.width}x{sensor.height}"
            raise ValueError(f"the green screen needs the 640x480 {self.rgb_camera_name}, got {size}")
        self._reset_overlay(env_idx)
        xyz = torch.tensor(self.xyz_configs, dtype=torch.float32, device=self.device)
        quat = torch.tensor(self.quat_configs, dtype=torch.float32, device=self.device)
        pos, rot = self.select_pos_ids[env_idx], self.select_quat_ids[env_idx]
        self.agent.robot.set_pose(SAFE_ROBOT_POSE)
        extras = self._extras(xyz, quat, env_idx)
        self._place(self.objs_carrot, self.select_carrot_ids, xyz[pos, 0], quat[rot, 0], 1.0, env_idx, extras["carrot"])
        self._place(self.objs_plate, self.select_plate_ids, xyz[pos, 1], quat[rot, 1], 2.0, env_idx, extras["plate"])
        self.agent.robot.set_pose(ROBOT_POSE)
        self.agent.reset(init_qpos=self._robot_init_qpos(env_idx))
        self._reset_bbox(env_idx)
        self._reset_stats(env_idx)

    def _reset_overlay(self, env_idx: torch.Tensor) -> None:
        picks = self.select_overlay_ids[env_idx].tolist()
        if not hasattr(self, "overlay_images") or len(env_idx) == self.num_envs:
            self.overlay_images = torch.zeros((self.num_envs, *OVERLAY_HW, 3), device=self.device)
            self.overlay_textures = torch.zeros((self.num_envs, *self.texture_hw, 3), device=self.device)
            self.overlay_mix = torch.zeros(self.num_envs, device=self.device)
        self.overlay_images[env_idx] = torch.tensor(
            np.stack([self.overlay_images_numpy[i] for i in picks]), dtype=torch.float32, device=self.device
        )
        self.overlay_textures[env_idx] = torch.tensor(
            np.stack([self.overlay_textures_numpy[i] for i in picks]), dtype=torch.float32, device=self.device
        )
        self.overlay_mix[env_idx] = torch.tensor([self.overlay_mix_numpy[i] for i in picks], device=self.device)

    def _chosen(self, env_idx=None):
        rows = range(self.num_envs) if env_idx is None else [int(i) for i in env_idx]
        carrots = [self.objs_carrot[self.carrot_names[int(self.select_carrot_ids[i])]] for i in rows]
        plates = [self.objs_plate[self.plate_names[int(self.select_plate_ids[i])]] for i in rows]
        return list(rows), carrots, plates

    def _world_bbox(self, names: list[str], q: torch.Tensor) -> torch.Tensor:
        """Axis-aligned size of the model boxes turned by ``q`` (upstream ``_reset_bbox``, :343)."""
        half = torch.stack([self.model_bbox_sizes[n] for n in names]) / 2
        corners = half[:, None, :] * CORNERS.to(half.device)[None]
        turned = corners @ rotation_conversions.quaternion_to_matrix(q).transpose(1, 2)
        return turned.max(dim=1).values - turned.min(dim=1).values

    def _reset_bbox(self, env_idx: torch.Tensor) -> None:
        rows, carrots, plates = self._chosen(env_idx)
        cq = torch.stack([a.pose.q[r] for r, a in zip(rows, carrots)])
        pq = torch.stack([a.pose.q[r] for r, a in zip(rows, plates)])
        if not hasattr(self, "carrot_bbox_world") or len(env_idx) == self.num_envs:
            self.carrot_bbox_world = torch.zeros((self.num_envs, 3), device=self.device)
            self.plate_bbox_world = torch.zeros((self.num_envs, 3), device=self.device)
        self.carrot_bbox_world[env_idx] = self._world_bbox([a.name for a in carrots], cq)
        self.plate_bbox_world[env_idx] = self._world_bbox([a.name for a in plates], pq)

    def _reset_stats(self, env_idx: torch.Tensor) -> None:
        if not hasattr(self, "consecutive_grasp"):
            n, dev = self.num_envs, self.device
            self.consecutive_grasp = torch.zeros(n, dtype=torch.int32, device=dev)
            self.episode_stats = {
                k: torch.zeros(n, dtype=torch.bool, device=dev)
                for k in ("is_src_obj_grasped", "consecutive_grasp", "src_on_target")
            }
            self.episode_stats.update(
                {
                    k: torch.zeros(n, device=dev)
                    for k in ("gripper_carrot_dist", "gripper_plate_dist", "carrot_plate_dist")
                }
            )
        else:
            self.consecutive_grasp[env_idx] = 0
            for value in self.episode_stats.values():
                value[env_idx] = 0
        self.extra_stats = {}

    def _settle(self, t: float = 0.5) -> None:
        """Run the physics ``t`` control periods without control (upstream :552; unused by v0.3's resets)."""
        if self.gpu_sim_enabled:
            self.scene._gpu_apply_all()
        for _ in range(int(self.sim_freq * t / self.control_freq)):
            self.scene.step()
        if self.gpu_sim_enabled:
            self.scene._gpu_fetch_all()

    # ------------------------------------------------------------------ success, language, observation
    def evaluate(self):
        """Upstream :578-690: the carrot is on the plate (xy within the plate's half box + 1 cm, above it by at
        most the two half heights + 5 cm) and touches it (contact force > 0.03 N); grasp flags for the reward."""
        rows, carrots, plates = self._chosen()
        carrot_p = torch.stack([a.pose.p[r] for r, a in zip(rows, carrots)])
        plate_p = torch.stack([a.pose.p[r] for r, a in zip(rows, plates)])
        grasped = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        for idx, name in enumerate(self.model_db_carrot):
            holding = self.agent.is_grasping(self.objs_carrot[name])
            grasped = torch.where(self.select_carrot_ids == idx, holding, grasped)
        self.consecutive_grasp += grasped
        self.consecutive_grasp[~grasped] = 0
        plate_half, carrot_half = self.plate_bbox_world / 2, self.carrot_bbox_world / 2
        offset = carrot_p - plate_p
        xy_ok = torch.linalg.norm(offset[:, :2], dim=1) <= plate_half.max(dim=1).values + XY_SLACK
        z_ok = (offset[:, 2] > 0) & (offset[:, 2] - plate_half[:, 2] - carrot_half[:, 2] <= Z_SLACK)
        force = torch.stack(
            [
                torch.linalg.norm(self.scene.get_pairwise_contact_forces(c, p)[r])
                for r, c, p in zip(rows, carrots, plates)
            ]
        ).to(self.device)
        success = xy_ok & z_ok & (force > MIN_CONTACT_FORCE)
        gripper_p = (self.agent.finger1_link.pose.p + self.agent.finger2_link.pose.p) / 2
        stats = self.episode_stats
        stats["src_on_target"] = success
        stats["is_src_obj_grasped"] = stats["is_src_obj_grasped"] | grasped
        stats["consecutive_grasp"] = stats["consecutive_grasp"] | (self.consecutive_grasp >= 5)
        stats["gripper_carrot_dist"] = torch.linalg.norm(gripper_p - carrot_p, dim=1)
        stats["gripper_plate_dist"] = torch.linalg.norm(gripper_p - plate_p, dim=1)
        stats["carrot_plate_dist"] = torch.linalg.norm(carrot_p - plate_p, dim=1)
        return dict(**stats, success=success)

    def is_final_subtask(self) -> bool:
        return True

    def get_language_instruction(self) -> list[str]:
        """``put {carrot name} on {plate name}`` from the model databases (upstream :697)."""
        return [self._instruction(i) for i in range(self.num_envs)]

    def _instruction(self, row: int) -> str:
        carrot = self.model_db_carrot[self.carrot_names[int(self.select_carrot_ids[row])]]["name"]
        plate = self.model_db_plate[self.plate_names[int(self.select_plate_ids[row])]]["name"]
        return f"put {carrot} on {plate}"

    def _robot_object_mask(self, segmentation: torch.Tensor) -> torch.Tensor:
        """``[b, H, W]`` True where the pixel shows a robot link or an object actor."""
        seg = segmentation[..., 0]
        keep = torch.cat([self.robot_link_ids, self.target_object_actor_ids]).to(seg.device, seg.dtype)
        return torch.isin(seg, keep)

    def _green_screen(self, rgb: torch.Tensor, segmentation: torch.Tensor) -> torch.Tensor:
        """Every pixel whose actor is neither a robot link nor an object shows the overlay photo (upstream :724)."""
        mask = (~self._robot_object_mask(segmentation)).to(torch.float32).unsqueeze(-1)
        out = self.overlay_images.to(rgb.device) * mask + rgb.to(torch.float32) * (1 - mask)
        return torch.clamp(out, 0, 255).to(torch.uint8)

    def _get_obs_sensor_data(self, apply_texture_transforms: bool = True) -> dict:
        data = super()._get_obs_sensor_data(apply_texture_transforms)
        visual = self.obs_mode_struct.visual
        if visual.rgb and visual.segmentation and self.overlay_images_numpy:
            cam = data[self.rgb_camera_name]
            cam["rgb"] = self._green_screen(cam["rgb"], cam["segmentation"])
        return data
