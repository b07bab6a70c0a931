"""rlinf-env-metaworld: MetaWorld (MT1 / MT10 / MT50 / ML45) for rlinf, plus scripted-expert demos."""

import importlib

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

__all__ = ['DIFFICULTY', 'INSTRUCTIONS', 'ML45_TEST', 'ML45_TRAIN', 'MT10', 'MT50', 'MetaWorldEnv']


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
