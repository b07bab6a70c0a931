"""rlinf-wm-wan: RLinf's action-conditioned Wan 2.2 world model (KeyFrame-Init Rollout) on diffusers."""

from rlinf_wm_wan.world_model import WanWorldModel

__all__ = ["WanWorldModel"]
