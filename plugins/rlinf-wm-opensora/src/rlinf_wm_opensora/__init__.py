"""rlinf-wm-opensora: RLinf's action-conditioned OpenSora world model as an rlinf simulator."""

from rlinf_core import lazy_getattr

# public name -> module: imported on first use, so that the rlinf entry point (plugin.py) stays light
_LAZY = {
    "OpenSoraWorldModel": "rlinf_wm_opensora.world_model",
    "STDiT3": "rlinf_wm_opensora._modeling",
    "STDiT3Config": "rlinf_wm_opensora._modeling",
}

__all__ = ["OpenSoraWorldModel", "STDiT3", "STDiT3Config"]


__getattr__ = lazy_getattr(__name__, _LAZY)
