"""rlinf-wm-opensora: RLinf's action-conditioned OpenSora world model as an rlinf simulator."""

from rlinf_wm_opensora._modeling import STDiT3, STDiT3Config

__all__ = ["OpenSoraWorldModel", "STDiT3", "STDiT3Config"]


def __getattr__(name):
    if name == "OpenSoraWorldModel":
        from rlinf_wm_opensora.world_model import OpenSoraWorldModel

        return OpenSoraWorldModel
    raise AttributeError(name)
