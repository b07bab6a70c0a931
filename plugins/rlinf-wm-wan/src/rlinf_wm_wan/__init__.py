"""rlinf-wm-wan: RLinf's action-conditioned Wan 2.2 world model (KeyFrame-Init Rollout) on diffusers."""

from rlinf_core import lazy_getattr

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "WanWorldModel": "rlinf_wm_wan.world_model",
}

__all__ = ["WanWorldModel"]


__getattr__ = lazy_getattr(__name__, _LAZY)
