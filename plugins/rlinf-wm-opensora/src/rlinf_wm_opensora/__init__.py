"""rlinf-wm-opensora: RLinf's action-conditioned OpenSora world model as an rlinf simulator."""

import importlib

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "OpenSoraWorldModel": "rlinf_wm_opensora.world_model",
    "STDiT3": "rlinf_wm_opensora._modeling",
    "STDiT3Config": "rlinf_wm_opensora._modeling",
}

__all__ = ['OpenSoraWorldModel', 'STDiT3', 'STDiT3Config']


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
