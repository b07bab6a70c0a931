"""rlinf-wm-wan: RLinf's action-conditioned Wan 2.2 world model (KeyFrame-Init Rollout) on diffusers."""

import importlib

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "WanWorldModel": "rlinf_wm_wan.world_model",
}

__all__ = ['WanWorldModel']


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
