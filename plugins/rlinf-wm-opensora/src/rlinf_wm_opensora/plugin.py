"""rlinf entry point of rlinf-wm-opensora: registers OpenSoraWorldModel by dotted path."""

from rlinf_core import hookimpl


@hookimpl
def register_world_models(register):
    register("rlinf_wm_opensora.world_model:OpenSoraWorldModel")


@hookimpl
def register_commands(register):
    register(
        "opensora-make-tiny",
        "rlinf_wm_opensora.make_tiny:main",
        "Write a tiny random OpenSora world model in the released layout.",
    )
