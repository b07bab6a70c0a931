"""rlinf-env-libero: the LIBERO suites (spatial / object / goal / 10 / 90 / 130) on robosuite for rlinf."""

import sys

from rlinf_core import lazy_getattr


def clear_sim_cache() -> None:
    """Close the idle LIBERO simulators and drop the compiled scenes cached in this process."""
    sim_module = sys.modules.get("rlinf_env_libero._sim")
    if sim_module is not None:
        sim_module.POOL.clear()
        sim_module.SCENES.clear()


# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "LIBERO_130_PARTS": "rlinf_env_libero.suites",
    "LiberoEnv": "rlinf_env_libero.env",
    "MAX_EPISODE_STEPS": "rlinf_env_libero.suites",
    "SUITES": "rlinf_env_libero.suites",
    "TaskInfo": "rlinf_env_libero.suites",
    "load_tasks": "rlinf_env_libero.suites",
}

__all__ = ["LIBERO_130_PARTS", "LiberoEnv", "MAX_EPISODE_STEPS", "SUITES", "TaskInfo", "clear_sim_cache", "load_tasks"]


__getattr__ = lazy_getattr(__name__, _LAZY)
