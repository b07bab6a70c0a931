"""The config groups of :class:`~rlinf_env_metaworld.env.MetaWorldEnv` (YAML sections ``render:``, ``reward:`` and
``sim:``), and the map from the flat key names (RLinf's, and this plugin's before the groups) to them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from rlinf_core import check_choice, check_number


@dataclass(frozen=True)
class MetaWorldRenderConfig:
    """What the cameras render (YAML group ``render:``).

    Args:
        image_size: side of the square RGB images, pixels.
        camera_name: main camera: ``corner``, ``corner2``, ``corner3``, ``corner4``, ``topview``, ``behindGripper``
            or ``gripperPOV``. RLinf moves ``corner2`` to ``[0.75, 0.075, 0.7]`` "to align with SFT": in MetaWorld 3
            that is exactly ``corner4`` (same orientation and field of view), the view of RLinf's MetaWorld SFT
            checkpoint.
        wrist_camera_name: optional second camera returned as ``wrist_images`` (e.g. ``gripperPOV``).
        flip_corner_cameras: rotate ``corner*`` images by 180 degrees (they render upside down).
        fast_render: turn off shadows, anti-aliasing and reflections (~10x faster on CPU). Images then look flatter
            than standard renders: keep ``false`` for policies pretrained on standard MetaWorld images.
        gl_backend: ``egl`` or ``osmesa`` (default: ``$MUJOCO_GL``, else ``egl``).
    """

    image_size: int = 128
    camera_name: str = "corner2"
    wrist_camera_name: str | None = None
    flip_corner_cameras: bool = True
    fast_render: bool = True
    gl_backend: str | None = None

    def __post_init__(self) -> None:
        check_number("render.image_size", self.image_size, low=8, hint="pixels per side")


@dataclass(frozen=True)
class MetaWorldRewardConfig:
    """How a step is rewarded (YAML group ``reward:``).

    Args:
        mode: ``sparse`` (1 while successful, else 0) or ``dense`` (metaworld's shaped reward divided by 10).
        coef: multiplies every reward (RLinf's ``reward_coef``).
    """

    mode: Literal["sparse", "dense"] = "sparse"
    coef: float = 1.0

    def __post_init__(self) -> None:
        check_choice("reward.mode", self.mode, ("sparse", "dense"))


@dataclass(frozen=True)
class MetaWorldSimConfig:
    """How the simulator starts an episode (YAML group ``sim:``).

    Args:
        settle_steps: zero-action steps after every reset, before the first observation; not counted in the
            episode. RLinf's env takes 16 (15 on the reset sub-envs, then 1 on all; RLinf v0.3
            rlinf/envs/metaworld/metaworld_env.py:59,312-316), so checkpoints trained or evaluated with RLinf expect
            16; LeRobot's MetaWorld env (the ``lerobot/metaworld_mt50`` recordings) takes none.
    """

    settle_steps: int = 0

    def __post_init__(self) -> None:
        check_number("sim.settle_steps", self.settle_steps, low=0)


#: flat key (this plugin's before the groups, and RLinf's ``reward_coef``) → (group, field): ``rlinf fit`` names the
#: grouped key when a config still uses the flat one
FLAT_KEYS: dict[str, tuple[str, str]] = {
    **{f.name: ("render", f.name) for f in fields(MetaWorldRenderConfig)},
    "reward_type": ("reward", "mode"),
    "reward_coef": ("reward", "coef"),
    "settle_steps": ("sim", "settle_steps"),
}

__all__ = ["FLAT_KEYS", "MetaWorldRenderConfig", "MetaWorldRewardConfig", "MetaWorldSimConfig"]
