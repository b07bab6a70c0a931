"""Entry point of the ``libero`` rlinf plugin."""

from rlinf_core import hookimpl


@hookimpl
def register_envs(register):
    from rlinf_env_libero.env import LiberoEnv

    register(LiberoEnv)
