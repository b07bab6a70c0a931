"""rlinf entry point of rlinf-wm-opensora: registers OpenSoraWorldModel."""

from rlinf_core import hookimpl


@hookimpl
def register_world_models(register):
    from rlinf_wm_opensora.world_model import OpenSoraWorldModel

    register(OpenSoraWorldModel)
