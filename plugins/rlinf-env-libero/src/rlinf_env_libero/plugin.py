"""Entry point of the ``libero`` rlinf plugin (registers by dotted path: nothing heavy is imported here)."""

from rlinf_core import hookimpl


@hookimpl
def register_envs(register):
    register("rlinf_env_libero.env:LiberoEnv")
