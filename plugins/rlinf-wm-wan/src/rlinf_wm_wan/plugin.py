"""rlinf entry point of rlinf-wm-wan: registers WanWorldModel by dotted path."""

from rlinf_core import hookimpl


@hookimpl
def register_world_models(register):
    register("rlinf_wm_wan.world_model:WanWorldModel")


@hookimpl
def register_commands(register):
    register(
        "wan-make-tiny",
        "rlinf_wm_wan.make_tiny:main",
        "Write a tiny random Wan 2.2 world model in the released layout.",
    )
