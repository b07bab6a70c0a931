"""Entry point of the ``metaworld`` rlinf plugin (registers by dotted path: nothing heavy is imported here)."""

from rlinf_core import hookimpl


@hookimpl
def register_envs(register):
    register("rlinf_env_metaworld.env:MetaWorldEnv")


@hookimpl
def register_commands(register):
    register(
        "metaworld-collect",
        "rlinf_env_metaworld.collect:main",
        "Record scripted-expert MetaWorld demos (the quickstart's SFT data).",
    )
