"""rlinf entry point of rlinf-wm-wan: registers WanWorldModel."""

from rlinf_core import hookimpl


@hookimpl
def register_world_models(register):
    from rlinf_wm_wan.world_model import WanWorldModel

    register(WanWorldModel)
