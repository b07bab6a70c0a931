"""ManiSkill3 environments for rlinf (CPU via Mesa lavapipe, or GPU)."""

import importlib

__version__ = "0.1.0"

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "ManiSkillEnv": "rlinf_env_maniskill.env",
}

__all__ = ['ManiSkillEnv']


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
