"""The config groups of :class:`~rlinf_env_maniskill.env.ManiSkillEnv` (YAML sections ``render:``, ``reward:`` and
``sim:``), and the map from the flat key names (RLinf's, and this plugin's before the groups) to them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from rlinf_core import check_choice

SHADER_PACKS = ("default", "minimal", "rt")
REWARD_MODES = ("sparse", "dense", "grasp")
SIM_BACKENDS = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class ManiSkillRenderConfig:
    """What the camera renders (YAML group ``render:``).

    Args:
        image_size: camera resolution, one side or ``[height, width]``.
        camera: ManiSkill sensor camera used as ``main_images`` (Bridge scenes: ``3rd_view_camera``).
        show_goal: render goal markers that ManiSkill hides from cameras (PickCube's green sphere); an image-only
            policy cannot see the goal otherwise.
        shader_pack: SAPIEN shader pack of the cameras: ``default`` as RLinf sets it (``sensor_configs.shader_pack``),
            ``minimal`` (ManiSkill's default, faster) or ``rt``.
        obs_mode: ManiSkill observation mode the tasks run in (RLinf: ``rgb+segmentation``). The images are the
            ``rgb`` of the task's own observation (``_get_obs_sensor_data``), so a task that edits its pixels there
            (RL4VLA's green screen) is seen as the task shows it.
    """

    image_size: int | list[int] = 224
    camera: str = "base_camera"
    show_goal: bool = True
    shader_pack: Literal["default", "minimal", "rt"] = "default"
    obs_mode: str = "rgb+segmentation"

    def __post_init__(self) -> None:
        size = [self.image_size] if isinstance(self.image_size, int) else list(self.image_size)
        if len(size) not in (1, 2) or min(size) < 1:
            raise ValueError(f"render.image_size must be one positive int or [height, width], got {self.image_size}")
        check_choice("render.shader_pack", self.shader_pack, SHADER_PACKS)
        if "rgb" not in self.obs_mode.split("+"):
            raise ValueError(f"render.obs_mode must contain rgb (e.g. rgb+segmentation), got {self.obs_mode!r}")

    @property
    def height_width(self) -> tuple[int, int]:
        """``(height, width)`` of the images."""
        size = [self.image_size] if isinstance(self.image_size, int) else list(self.image_size)
        return size[0], size[-1]


@dataclass(frozen=True)
class ManiSkillRewardConfig:
    """How a step is rewarded (YAML group ``reward:``).

    Args:
        mode: ``sparse`` (1 on success, -1 on ManiSkill's fail), ``dense`` (ManiSkill's normalized dense reward in
            [0, 1]) or ``grasp`` (RLinf's default ManiSkill reward ``0.1·grasped + 0.1·consecutive_grasp +
            1·(success ∧ grasped)``, used with ``relative: true`` as RLinf's ``use_rel_reward``).
        relative: reward the change of the reward since the previous step (RLinf's ``use_rel_reward``).
    """

    mode: Literal["sparse", "dense", "grasp"] = "sparse"
    relative: bool = False

    def __post_init__(self) -> None:
        check_choice("reward.mode", self.mode, REWARD_MODES)


@dataclass(frozen=True)
class ManiSkillSimConfig:
    """The simulator and where it finds its tasks and assets (YAML group ``sim:``).

    Args:
        backend: ``auto`` (GPU when CUDA is available), ``cpu`` or ``gpu``.
        control_mode: ManiSkill control mode; must take 7-D actions (``null``: the task's default, e.g. the WidowX
            controller of the Bridge scenes).
        config: ManiSkill ``sim_config`` overrides, e.g. ``{sim_freq: 500, control_freq: 5}``.
        make_kwargs: extra ``gym.make`` keyword arguments (e.g. ``robot_init_qpos_noise``).
        task_modules: Python modules imported before the simulator starts, to register more ManiSkill tasks.
            RL4VLA's PutOnPlateInScene25 family (``rlinf_env_maniskill.rl4vla``) is imported by itself when a task
            id needs it; its assets: ``make_kwargs: {asset_dir: ...}`` or ``MANISKILL_ASSET_DIR`` (see
            ``rlinf maniskill-assets check``).
        cache_dir: holds ManiSkill assets (``maniskill/``, used as ``MS_ASSET_DIR``) and the Mesa shader cache;
            default ``$RLINF_CACHE_DIR`` or ``~/.cache/rlinf`` (an exported ``MS_ASSET_DIR`` is kept when
            ``cache_dir`` is not given).
    """

    backend: Literal["auto", "cpu", "gpu"] = "auto"
    control_mode: str | None = "pd_ee_delta_pose"
    config: dict[str, Any] | None = None
    make_kwargs: dict[str, Any] | None = None
    task_modules: list[str] | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        check_choice("sim.backend", self.backend, SIM_BACKENDS)


#: flat key (this plugin's before the groups, and RLinf's ``use_rel_reward``) → (group, field): ``rlinf fit`` names the
#: grouped key when a config still uses the flat one
FLAT_KEYS: dict[str, tuple[str, str]] = {
    **{f.name: ("render", f.name) for f in fields(ManiSkillRenderConfig)},
    "reward_mode": ("reward", "mode"),
    "relative_reward": ("reward", "relative"),
    "use_rel_reward": ("reward", "relative"),
    "sim_backend": ("sim", "backend"),
    "control_mode": ("sim", "control_mode"),
    "sim_config": ("sim", "config"),
    "make_kwargs": ("sim", "make_kwargs"),
    "task_modules": ("sim", "task_modules"),
    "cache_dir": ("sim", "cache_dir"),
}

__all__ = ["FLAT_KEYS", "ManiSkillRenderConfig", "ManiSkillRewardConfig", "ManiSkillSimConfig"]
