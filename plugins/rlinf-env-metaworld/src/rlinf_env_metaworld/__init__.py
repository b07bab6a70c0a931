"""rlinf-env-metaworld: MetaWorld (MT1 / MT10 / MT50 / ML45) for rlinf, plus scripted-expert demos."""

from rlinf_core import lazy_getattr

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "DIFFICULTY": "rlinf_env_metaworld.tasks",
    "INSTRUCTIONS": "rlinf_env_metaworld.tasks",
    "ML45_TEST": "rlinf_env_metaworld.tasks",
    "ML45_TRAIN": "rlinf_env_metaworld.tasks",
    "MT10": "rlinf_env_metaworld.tasks",
    "MT50": "rlinf_env_metaworld.tasks",
    "MetaWorldEnv": "rlinf_env_metaworld.env",
}

__all__ = ["DIFFICULTY", "INSTRUCTIONS", "ML45_TEST", "ML45_TRAIN", "MT10", "MT50", "MetaWorldEnv"]


__getattr__ = lazy_getattr(__name__, _LAZY)
