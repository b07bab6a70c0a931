"""ManiSkill3 environments for rlinf (CPU via Mesa lavapipe, or GPU)."""

from rlinf_core import lazy_getattr

__version__ = "0.1.0"

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "ManiSkillEnv": "rlinf_env_maniskill.env",
}

__all__ = ["ManiSkillEnv"]


__getattr__ = lazy_getattr(__name__, _LAZY)
