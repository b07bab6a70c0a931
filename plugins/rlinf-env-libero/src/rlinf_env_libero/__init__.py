"""rlinf-env-libero: the LIBERO suites (spatial / object / goal / 10 / 90 / 130) on robosuite for rlinf."""

import sys

from rlinf_env_libero.env import LiberoEnv
from rlinf_env_libero.suites import LIBERO_130_PARTS, MAX_EPISODE_STEPS, SUITES, TaskInfo, load_tasks


def clear_sim_cache() -> None:
    """Close the idle LIBERO simulators and drop the compiled scenes cached in this process."""
    sim_module = sys.modules.get("rlinf_env_libero._sim")
    if sim_module is not None:
        sim_module.POOL.clear()
        sim_module.SCENES.clear()


__all__ = [
    "LIBERO_130_PARTS",
    "MAX_EPISODE_STEPS",
    "SUITES",
    "LiberoEnv",
    "TaskInfo",
    "clear_sim_cache",
    "load_tasks",
]
