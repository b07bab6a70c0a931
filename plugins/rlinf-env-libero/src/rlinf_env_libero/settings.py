"""The config groups of :class:`~rlinf_env_libero.env.LiberoEnv` (YAML sections ``render:``, ``reward:`` and
``sim:``), and the map from the flat key names (RLinf's, and this plugin's before the groups) to them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from rlinf_core import check_choice, check_number


@dataclass(frozen=True)
class LiberoRenderConfig:
    """What the cameras render (YAML group ``render:``).

    Args:
        image_size: side of the square camera images, pixels (RLinf's guides render 256; OpenVLA-OFT resizes to 224
            itself).
        use_wrist_image: also render the wrist camera as ``wrist_images``.
        obs_mode: ``rgb`` (cameras rendered) or ``state`` (no renderer is built: cheaper simulators for state-based
            policies; ``main_images`` is then a black 1x1 placeholder).
        fast_render: no shadow maps, anti-aliasing or reflections (several times faster on CPU). Images look flatter
            than the standard renders pretrained LIBERO policies saw: keep ``false`` to evaluate or fine-tune them.
        gl_backend: ``egl`` or ``osmesa`` (default: ``$MUJOCO_GL``, else ``egl``); must be chosen before anything
            imports MuJoCo.
    """

    image_size: int = 256
    use_wrist_image: bool = False
    obs_mode: Literal["rgb", "state"] = "rgb"
    fast_render: bool = False
    gl_backend: Literal["egl", "osmesa"] | None = None

    def __post_init__(self) -> None:
        check_choice("render.obs_mode", self.obs_mode, ("rgb", "state"))
        if self.obs_mode == "rgb":
            check_number("render.image_size", self.image_size, low=8, hint="pixels per side")
        elif self.use_wrist_image:
            raise ValueError("render.use_wrist_image needs render.obs_mode: rgb")


@dataclass(frozen=True)
class LiberoRewardConfig:
    """How a step is rewarded (YAML group ``reward:``).

    Args:
        coef: reward for reaching the goal (RLinf's ``reward_coef``: 5 for GRPO, whose reward filter bounds 0.5 /
            4.5 assume it; 1 otherwise).
        relative: reward the change of success (``coef`` when the goal is reached, ``-coef`` when it is lost again
            under ``ignore_terminations``) instead of ``coef`` on every successful step (RLinf's
            ``use_rel_reward``).
    """

    coef: float = 1.0
    relative: bool = True


@dataclass(frozen=True)
class LiberoSimConfig:
    """How the simulators start an episode, and how many this process keeps (YAML group ``sim:``).

    Args:
        settle_steps: still steps (zero arm motion) after every reset so objects come to rest, not counted in the
            episode (OpenVLA-OFT's eval waits 10, RLinf 15).
        settle_gripper: gripper command during the settle steps: ``open`` (-1, OpenVLA-OFT's dummy action and
            RLinf's ``reset_gripper_open: true``) or ``neutral`` (0, RLinf's experiment configs,
            ``reset_gripper_open: false``).
        placement_seed: numpy seed of LIBERO's fixture placement (cabinets, stoves: bodies the initial states do not
            cover) at every reset. ``per_trial``: a hash of the task and trial, so the scene is a function of the
            initial state id. ``rlinf``: as RLinf v0.3, which seeds every sub-env before each reset with
            ``(seed + rank) * n + e`` (``n`` sub-envs reset together, ``e`` the sub-env's index; rank = this env's
            shard index; rlinf/envs/libero/libero_env.py:663 through rlinf/envs/venv/venv.py:844-866): on rank 0
            with seed 0, sub-env ``e`` always gets ``e``, so the fixtures of a sub-env land in the same place in every
            episode, the scenes RLinf's LIBERO checkpoints were trained and evaluated in.
        cache_size: idle simulators kept in this process for reuse (each holds a compiled scene and a GL context:
            about 0.75 GB of RAM with CPU rendering).
        scene_cache_size: compiled MuJoCo scenes kept in this process, so another simulator of a recent task (e.g.
            the 8 members of a GRPO group) skips MuJoCo's compile (several seconds); about 0.25 GB each.
    """

    settle_steps: int = 10
    settle_gripper: Literal["open", "neutral"] = "open"
    placement_seed: Literal["per_trial", "rlinf"] = "per_trial"
    cache_size: int = 4
    scene_cache_size: int = 4

    def __post_init__(self) -> None:
        check_number("sim.settle_steps", self.settle_steps, low=0)
        check_choice("sim.settle_gripper", self.settle_gripper, ("open", "neutral"))
        check_choice("sim.placement_seed", self.placement_seed, ("per_trial", "rlinf"))
        check_number("sim.cache_size", self.cache_size, low=0)
        check_number("sim.scene_cache_size", self.scene_cache_size, low=0)


#: flat key (this plugin's before the groups, and RLinf's ``reward_coef`` / ``use_rel_reward``) → (group, field):
#: ``rlinf fit`` names the grouped key when a config still uses the flat one
FLAT_KEYS: dict[str, tuple[str, str]] = {
    **{f.name: ("render", f.name) for f in fields(LiberoRenderConfig)},
    "reward_coef": ("reward", "coef"),
    "use_rel_reward": ("reward", "relative"),
    "settle_steps": ("sim", "settle_steps"),
    "settle_gripper": ("sim", "settle_gripper"),
    "placement_seed": ("sim", "placement_seed"),
    "sim_cache_size": ("sim", "cache_size"),
    "scene_cache_size": ("sim", "scene_cache_size"),
}

__all__ = ["FLAT_KEYS", "LiberoRenderConfig", "LiberoRewardConfig", "LiberoSimConfig"]
